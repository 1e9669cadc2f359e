from __future__ import annotations

from pathlib import Path

from edgepipe import Message, load_pipeline
from edgepipe.testing import ListSink, run_pipeline

DEMO = Path(__file__).resolve().parents[2] / "pipelines" / "demo.py"


def test_demo_sees_the_moving_square() -> None:
    pipeline = load_pipeline(DEMO, ["--frames", "40", "--fps", "200"])
    out: ListSink[Message] = ListSink()
    pipeline.sink("capture", out, inputs="motion")
    report = run_pipeline(pipeline)
    assert report.stopped_by == "end"
    assert report.stats.node("camera").items_out == 40
    assert len(out.items) >= 30  # the detector may skip frames ("latest"), never most of them
    side = 240 // 6
    for message in out.items:
        x0, y0, x1, y1 = message.data["box_xyxy"]
        # the box covers the square's old and new place: about one side plus its step
        assert side <= x1 - x0 <= side + 8
        assert side <= y1 - y0 <= side + 20
