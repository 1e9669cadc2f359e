from __future__ import annotations

from pathlib import Path

import av

from edgepipe import Message, load_pipeline
from edgepipe.testing import ListSink, run_pipeline

DEMO = Path(__file__).resolve().parents[2] / "pipelines" / "demo.py"


def test_demo_sees_motion_in_the_synthetic_scene() -> None:
    pipeline = load_pipeline(DEMO, ["--source", "synthetic://320x240@30"])
    out: ListSink[Message] = ListSink()
    pipeline.sink("capture", out, inputs="motion")
    report = run_pipeline(pipeline, duration_s=1.5)
    assert report.stats.node("camera").items_out >= 40
    assert len(out.items) >= 30  # the detector may skip frames ("latest"), never most of them
    for message in out.items:
        x0, y0, x1, y1 = message.data["box_xyxy"]
        assert 0 <= x0 < x1 <= 320
        assert 0 <= y0 < y1 <= 240
        assert x1 - x0 >= 8  # the square moves 4 px a frame: a real region, not a speck


def test_demo_records_an_annotated_clip(tmp_path: Path) -> None:
    out = tmp_path / "annotated.mp4"
    pipeline = load_pipeline(DEMO, ["--source", "synthetic://320x240@30", "--record", str(out)])
    run_pipeline(pipeline, duration_s=1.5)
    with av.open(str(out)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) > 20
    yellow = (frames[-1][:, :, 0] > 180) & (frames[-1][:, :, 1] > 180) & (frames[-1][:, :, 2] < 100)
    assert yellow.sum() > 100  # the motion box and its label are drawn
