"""The shipped pipelines' ``--mqtt`` and ``--events-dir``: a real Mosquitto hears their results,
and face privacy's event clips hold the pixelated picture, never the camera's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import av
import numpy as np
import pytest

from edgepipe import Message, load_pipeline
from edgepipe.runner import RunConfig
from edgepipe.sinks.mqtt.config import default_device
from edgepipe.testing import ListSink, run_pipeline
from edgepipe.vision import Detections
from scripts import tiny_lm
from tests.sinks.broker import Mosquitto, subscribed
from tests.support.cli_process import start_async

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained ~0.4M-parameter decoder, for describe_scene."""
    return tiny_lm.write(tmp_path_factory.mktemp("lm"), tiny_lm.TinyConfig(max_seq_len=256), "gqa").parent


async def run_edgepipe(*args: str, cwd: Path) -> tuple[int, str]:
    process = await start_async("run", *args, cwd=cwd)
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=180)
    return process.returncode or 0, stderr.decode()


def face_boxes(heard: list) -> int:  # type: ignore[type-arg]
    return sum(len(h.json()["boxes"]) for h in heard)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["face_privacy", "demo", "describe_scene"])
async def test_each_pipeline_publishes_its_faces_and_state_with_mqtt(
    name: str, mosquitto: Mosquitto, centerface: Path, model: Path, tmp_path: Path
) -> None:
    extra = ["--model", str(model), "--every-s", "0.5", "--window-s", "1", "--max-new-tokens", "4"]
    base = f"edgepipe/{default_device()}/{name}"
    here = tmp_path / "run"  # the broker keeps its files in tmp_path
    here.mkdir()
    async with subscribed(mosquitto.port) as sub:
        code, stderr = await run_edgepipe(
            str(REPO / "pipelines" / f"{name}.py"), "--mqtt", mosquitto.url, "--duration", "4",
            *(extra if name == "describe_scene" else []), cwd=here,
        )  # fmt: skip
        assert code == 0, stderr[-3000:]
        assert f"'{name}' ended (stop)" in stderr, stderr[-3000:]  # drained, not "forced"
        await sub.wait_for(lambda: sub.on(f"{base}/status") and sub.on(f"{base}/status")[-1].payload == b"offline",
                           what="the offline status")  # fmt: skip
    assert face_boxes(sub.on(f"{base}/camera/detections")) > 0  # the synthetic scene's face
    assert sub.on(f"{base}/camera/count"), sorted({h.topic for h in sub.heard})
    assert any(h.json()["state"] == "live" for h in sub.on(f"{base}/camera/source_state"))
    if name == "describe_scene":  # the language model's descriptions are events
        assert any(h.json().get("new_tokens") for h in sub.heard if h.topic.endswith("/event"))
    assert list(here.iterdir()) == []  # no file: clips only with --events-dir


@pytest.mark.slow
async def test_face_privacy_publishes_its_event_clips(
    mosquitto: Mosquitto, centerface: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events"
    async with subscribed(mosquitto.port, ("edgepipe/+/face_privacy/+/event",)) as sub:
        code, stderr = await run_edgepipe(
            str(REPO / "pipelines" / "face_privacy.py"), "--mqtt", mosquitto.url, "--events-dir", str(events),
            "--duration", "4", cwd=tmp_path,
        )  # fmt: skip
        assert code == 0, stderr[-3000:]
        await sub.wait_for(lambda: len(sub.heard) >= 2, what="a clip's start and end")
    started = [h.json() for h in sub.heard]
    assert (started[0]["what"], started[0]["state"]) == ("recording", "start"), started
    # its closing message is an ordinary result of the stage: published as the start is
    assert [(m["state"], m["path"], m["error"]) for m in started[1:]] == [("end", started[0]["path"], None)]
    assert started[0]["trigger"]["kind"] == "detection"
    assert "face" in started[0]["trigger"]["reason"]
    [clip] = list(events.glob("*.mp4"))  # finished at the end of the run, under the name it announced
    assert clip.name == Path(started[0]["path"]).name
    with av.open(str(clip)) as container:
        assert sum(1 for _ in container.decode(video=0)) > 5


@pytest.mark.slow
def test_face_privacy_event_clips_hold_the_blurred_picture(
    tmp_path: Path, make_clip, centerface: Path
) -> None:  # type: ignore[no-untyped-def]
    source = make_clip("privacy.mp4", width=1280, height=720, fps=15, seconds=2)
    events = tmp_path / "events"
    pipeline = load_pipeline(REPO / "pipelines" / "face_privacy.py",
                             ["--source", str(source), "--events-dir", str(events)])  # fmt: skip
    faces: ListSink[Detections] = ListSink()
    told: ListSink[Message] = ListSink()
    pipeline.sink("capture", faces, inputs="faces")
    pipeline.sink("told", told, inputs="events")
    run_pipeline(pipeline, RunConfig(governed=False))
    [end] = [m.data for m in told.items if m.data.get("state") == "end"]  # the file ended: clip saved
    clip = Path(end["path"])
    assert clip.parent == events
    assert end["trigger"]["kind"] == "detection"
    with av.open(str(source)) as src, av.open(str(clip)) as rec:
        originals = [f.to_ndarray(format="gray") for f in src.decode(video=0)]
        recorded = [f.to_ndarray(format="gray") for f in rec.decode(video=0)]
    assert 15 <= len(recorded) <= len(originals) == len(faces.items) == 30
    offset = len(originals) - len(recorded)  # the clip runs to the end of the file (post-roll 5 s)
    checked = 0
    for result, before, after in zip(faces.items[offset:], originals[offset:], recorded, strict=True):
        for face in result:
            x1, y1, x2, y2 = (int(v) for v in face.box)
            if x2 - x1 < 48 or y2 - y1 < 48:  # blocks of 6 px and more: detail clearly gone
                continue
            detail_before = np.abs(np.diff(before[y1:y2, x1:x2].astype(float), axis=1)).mean()
            detail_after = np.abs(np.diff(after[y1:y2, x1:x2].astype(float), axis=1)).mean()
            assert detail_after < 0.5 * detail_before, (result.seq, detail_before, detail_after)
            checked += 1
    assert checked >= 5


@pytest.mark.slow
async def test_two_processes_on_one_box_with_their_own_device_keep_their_sessions(
    mosquitto: Mosquitto, centerface: Path, tmp_path: Path
) -> None:
    """The fleet layout of docs/mqtt.md, one process per camera on one box: ``--mqtt-device`` (or
    ``EDGEPIPE_DEVICE``) gives each its own client id, topics and last will; with the host name
    for both, the broker would close one's session each time the other connects."""
    script = str(REPO / "pipelines" / "face_privacy.py")
    common = ["--mqtt", mosquitto.url, "--duration", "6", "--source", "synthetic://320x240@10",
              "--input-size", "320"]  # fmt: skip
    async with subscribed(mosquitto.port, ("edgepipe/+/face_privacy/#",)) as sub:
        cam1 = start_async("run", script, *common, "--mqtt-device", "cam1", cwd=tmp_path)
        cam2 = start_async("run", script, *common, cwd=tmp_path, env={"EDGEPIPE_DEVICE": "cam2"})
        processes = [await cam1, await cam2]
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in processes)), 180)
        for process, (_, stderr) in zip(processes, outputs, strict=True):
            assert process.returncode == 0, stderr.decode()[-3000:]
            assert b"reconnect" not in stderr, stderr.decode()[-3000:]
        for device in ("cam1", "cam2"):
            status = f"edgepipe/{device}/face_privacy/status"
            await sub.wait_for(lambda s=status: [h.payload for h in sub.on(s)][-1:] == [b"offline"],
                               what=f"{device}'s offline status")  # fmt: skip
            assert [h.payload for h in sub.on(status)] == [b"online", b"offline"]  # once each: no takeover
            assert sub.on(f"edgepipe/{device}/face_privacy/camera/detections")
    broker_log = mosquitto.log.read_text()
    assert "already connected" not in broker_log, broker_log[-3000:]
    for client in ("edgepipe-cam1-face_privacy", "edgepipe-cam2-face_privacy"):
        assert f"as {client}" in broker_log, broker_log[-3000:]
