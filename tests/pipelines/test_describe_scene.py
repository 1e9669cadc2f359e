from __future__ import annotations

import re
import socket
from pathlib import Path

from edgepipe import Message, load_pipeline
from edgepipe.lm import tiny
from edgepipe.testing import ListSink, run_pipeline

PIPELINE = Path(__file__).resolve().parents[2] / "pipelines" / "describe_scene.py"


def test_descriptions_stream_from_the_synthetic_camera(tmp_path: Path, centerface: Path) -> None:
    model = tiny.write(tmp_path / "lm", tiny.TinyConfig(max_seq_len=256), "gqa").parent
    pipeline = load_pipeline(
        PIPELINE, ["--model", str(model), "--every-s", "0.5", "--window-s", "1", "--max-new-tokens", "8"]
    )
    out: ListSink[Message] = ListSink()
    pipeline.sink("capture", out, inputs="describe")
    report = run_pipeline(pipeline, duration_s=2.5)
    events = [m.data for m in out.items if m.kind == "event"]
    assert len(events) >= 2
    assert all(e["new_tokens"] == 8 or e["stop_reason"] == "stop_token" for e in events)
    assert "nothing detected in" in events[-1]["prompt"]  # the synthetic scene has no faces
    assert report.stats.node("describe").errors == 0
    assert report.stats.node("faces").items_out > 5  # detection kept flowing meanwhile


def test_the_demo_model_is_built_once_into_the_cache(tmp_path: Path) -> None:
    folder = tiny.demo_model(tmp_path / "tiny-lm")
    stamp = (folder / "model.onnx").stat().st_mtime_ns
    assert tiny.demo_model(tmp_path / "tiny-lm") == folder
    assert (folder / "model.onnx").stat().st_mtime_ns == stamp
    assert (folder / "tokenizer.json").is_file()


def test_a_camera_that_cannot_be_reached_is_reported(tmp_path: Path, centerface: Path) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = tiny.write(tmp_path / "lm", tiny.TinyConfig(max_seq_len=256), "gqa").parent
    url = f"rtsp://127.0.0.1:{port}/cam"
    args = ["--source", url, "--model", str(model), "--every-s", "0.6", "--max-new-tokens", "2"]
    pipeline = load_pipeline(PIPELINE, args)
    out: ListSink[Message] = ListSink()
    pipeline.sink("capture", out, inputs="describe")
    run_pipeline(pipeline, duration_s=2.0)
    events = [m.data for m in out.items if m.kind == "event"]
    assert events, "no report while the camera is down"
    state = events[-1]["sources"]["camera"]
    assert state["state"] in ("connecting", "reconnecting")
    assert state["last_frame_s"] is None
    assert re.search(r"\(camera: (re)?connecting( \(.+\))?, no frames yet", events[-1]["prompt"])
    assert "no input" in events[-1]["prompt"]
