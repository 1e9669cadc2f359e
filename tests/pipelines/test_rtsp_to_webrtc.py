"""pipelines/rtsp_to_webrtc.py served on 127.0.0.1 and watched by a real aiortc peer."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe import load_pipeline
from scripts.rtsp_camera import RtspServer
from tests.support.cli_process import edgepipe
from tests.support.viewing import connect, messages_of, served, video_feeds

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "pipelines" / "rtsp_to_webrtc.py"
WATCH_HINT = "to watch it: add --port 8080, then open http://127.0.0.1:8080/"

pytestmark = pytest.mark.usefixtures("libx264")


@pytest.mark.slow
async def test_the_camera_streams_with_its_detections(centerface: Path) -> None:
    args = ["--source", "synthetic://640x360@30", "--detect", "centerface", "--every", "2"]
    assert video_feeds(load_pipeline(PIPELINE, args)) == {"view": ("camera",)}
    async with served(load_pipeline(PIPELINE, args)) as run:
        peer = await connect(run.url)
        frames = await peer.frames(30)
        dets = await messages_of(peer, "detections", 10)
        await peer.pc.close()
    assert (frames[0].width, frames[0].height) == (640, 360)
    assert frames[-1].to_ndarray(format="gray").std() > 10  # the moving scene, not a flat picture
    assert len(dets) >= 10
    assert all(d["source"] == "camera" and (d["w"], d["h"]) == (640, 360) for d in dets)
    # The synthetic scene's face, in (nearly) every result: found by the model, carried by the tracker.
    assert sum(len(d["boxes"]) == 1 for d in dets) >= 0.8 * len(dets), [d["boxes"] for d in dets]
    assert {b[5] for d in dets for b in d["boxes"]} == {"face"}
    assert {d["inferred"] for d in dets} == {True, False}  # --every 2: the tracker fills between
    [sync] = [m for m in peer.messages if m["kind"] == "sync"]
    received = {sync["first_pts_90k"] + (f.pts - frames[0].pts) % 2**32 for f in frames}
    assert {d["pts_90k"] for d in dets} & received, "results map onto frames the viewer received"


@pytest.mark.slow
async def test_an_rtsp_camera_reaches_the_viewer(rtsp_server: RtspServer) -> None:
    async with served(load_pipeline(PIPELINE, ["--source", rtsp_server.url])) as run:
        peer = await connect(run.url)
        frames = await peer.frames(30)
        await peer.pc.close()
    assert (frames[0].width, frames[0].height) == (320, 240)  # the server's picture, not a stand-in
    assert frames[-1].to_ndarray(format="gray").std() > 10  # its ball pattern, not a flat picture
    assert not [m for m in peer.messages if m["kind"] == "detections"]  # --detect none: video only
    assert run.report is not None
    assert run.report.stats.node("view").errors == 0


@pytest.mark.slow
def test_edgepipe_run_says_how_to_watch_a_pipeline_that_streams(tmp_path: Path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text(
        "from edgepipe import Pipeline\n"
        "from edgepipe.media import VideoSource\n\n\n"
        "def pipeline() -> Pipeline:\n"
        "    p = Pipeline('plain')\n"
        "    p.sink('drop', lambda f: None, inputs=p.source('camera', VideoSource()))\n"
        "    return p\n"
    )

    def run(path: Path, *more: str) -> str:
        done = edgepipe("run", path, "--duration", "0.5", *more)
        assert done.returncode == 0, done.stderr
        assert "ended (stop)" in done.stderr, done.stderr  # drained, not "forced"
        return done.stderr

    assert WATCH_HINT in run(PIPELINE)
    assert WATCH_HINT not in run(PIPELINE, "--port", "0")  # served: the URL line says where instead
    assert WATCH_HINT not in run(plain)  # nothing to watch
