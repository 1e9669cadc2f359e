from __future__ import annotations

from pathlib import Path

import av
import pytest

from edgepipe import Message, load_pipeline
from edgepipe.runner import RunConfig
from edgepipe.testing import ListSink, run_pipeline
from tests.support.viewing import connect, messages_of, served, video_feeds

DEMO = Path(__file__).resolve().parents[2] / "pipelines" / "demo.py"


@pytest.mark.slow
def test_demo_sees_motion_in_the_synthetic_scene() -> None:
    pipeline = load_pipeline(DEMO, ["--source", "synthetic://320x240@30", "--detect", "none"])
    out: ListSink[Message] = ListSink()
    pipeline.sink("capture", out, inputs="motion")
    report = run_pipeline(pipeline, RunConfig(governed=False, duration_s=1.5))
    assert report.stopped_by == "stop"  # drained, not "forced"
    assert report.stats.node("camera").items_out >= 40
    assert len(out.items) >= 30  # the detector may skip frames ("latest"), never most of them
    for message in out.items:
        x0, y0, x1, y1 = message.data["box_xyxy"]
        assert 0 <= x0 < x1 <= 320
        assert 0 <= y0 < y1 <= 240
        assert x1 - x0 >= 8  # the square moves 4 px a frame: a real region, not a speck


@pytest.mark.slow
def test_demo_records_an_annotated_clip(tmp_path: Path, centerface: Path) -> None:
    out = tmp_path / "annotated.mp4"  # the model is in the cache first: the time is for the video
    pipeline = load_pipeline(DEMO, ["--source", "synthetic://320x240@30", "--record", str(out)])
    # The face box waits for the model's first run (~1 s loaded).
    report = run_pipeline(pipeline, RunConfig(governed=False, duration_s=3.0))
    assert report.stopped_by == "stop"  # the recording and the detector drained, not "forced"
    with av.open(str(out)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) > 20
    yellow = (frames[-1][:, :, 0] > 180) & (frames[-1][:, :, 1] > 180) & (frames[-1][:, :, 2] < 100)
    assert yellow.sum() > 100  # the motion box and its label are drawn
    green = [(f[:, :, 1] > 180) & (f[:, :, 0] < 100) & (f[:, :, 2] < 100) for f in frames]
    assert max(g.sum() for g in green) > 100  # the synthetic camera's face, found and boxed


@pytest.mark.slow
def test_demo_detects_faces_between_model_runs_with_the_tracker(make_clip, centerface: Path) -> None:  # type: ignore[no-untyped-def]
    from edgepipe.vision import Detections

    clip = make_clip("demo_face.mp4", width=640, height=360, fps=15, seconds=2)
    pipeline = load_pipeline(DEMO, ["--source", str(clip), "--every", "2"])
    faces: ListSink[Detections] = ListSink()
    pipeline.sink("capture", faces, inputs="faces")
    report = run_pipeline(pipeline, RunConfig(governed=False))
    assert report.stats.node("faces").errors == 0
    found = [r for r in faces.items if len(r)]
    assert any(r.inferred for r in found)
    assert any(not r.inferred for r in found)  # frames the model skipped still carry the box
    assert {d.track_id for r in found for d in r} != {None}


@pytest.mark.slow
def test_demo_without_detection_needs_no_model(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    pipeline = load_pipeline(DEMO, ["--source", "synthetic://320x240@30", "--detect", "none"])
    report = run_pipeline(pipeline, RunConfig(governed=False, duration_s=0.5))
    assert "faces" not in {n.node_id for n in report.stats.nodes}
    assert report.stats.node("motion").items_out > 0


def test_viewers_see_the_annotated_picture_when_there_is_one() -> None:
    plain = ["--source", "synthetic://320x240@30", "--detect", "none"]
    assert video_feeds(load_pipeline(DEMO, plain)) == {"view": ("camera",)}
    assert video_feeds(load_pipeline(DEMO, [*plain, "--record", "out.mp4"])) == {"view": ("annotate",)}


@pytest.mark.usefixtures("libx264")
async def test_a_viewer_receives_the_video_and_the_motion() -> None:
    async with served(load_pipeline(DEMO, ["--source", "synthetic://320x240@30", "--detect", "none"])) as run:
        peer = await connect(run.url)
        frames = await peer.frames(10)
        motion = await messages_of(peer, "motion", 5)
        await peer.pc.close()
    assert (frames[0].width, frames[0].height) == (320, 240)
    assert len(motion) >= 5
    for message in motion:
        x0, y0, x1, y1 = message["box_xyxy"]
        assert 0 <= x0 < x1 <= 320
        assert 0 <= y0 < y1 <= 240
