"""scripts/bench/headroom/pipeline.py: a timed run stops cleanly while its language model writes,
with the governor pacing the model as slow as it goes (6%: each token step waits ~16x its length)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe import Message, load_pipeline
from edgepipe.runner import RunConfig
from edgepipe.testing import ListSink, run_pipeline
from scripts import tiny_lm

SCRIPT = Path(__file__).resolve().parents[4] / "scripts" / "bench" / "headroom" / "pipeline.py"

pytestmark = pytest.mark.slow


def test_a_timed_run_ends_within_the_drain_while_the_paced_model_writes(
    tmp_path: Path, clip: Path, centerface: Path
) -> None:
    # ~1.4 ms a step: at 6% a 200-token answer takes ~5 s, five times the drain deadline.
    config = tiny_lm.TinyConfig(hidden=384, layers=6, heads=6, kv_heads=2, ffn=1024)
    model = tiny_lm.write(tmp_path / "lm", config, "gqa").parent
    args = ["--clip", str(clip), "--model", str(model), "--cameras", "2", "--input-size", "320",
            "--max-new-tokens", "200"]  # fmt: skip
    pipeline = load_pipeline(SCRIPT, args)
    words: ListSink[Message] = ListSink()
    pipeline.sink("words", words, inputs="describe")
    # A target of 5% of the cores: the governor paces the model to its floor at its first move.
    report = run_pipeline(pipeline, RunConfig(duration_s=4.0, drain_timeout_s=1.0, headroom=0.95))
    assert report.stopped_by == "stop"  # not "forced": the drain did not need cancelling
    sched = report.stats.sched
    assert sched is not None
    [pace] = [k for k in sched["knobs"] if k["node"] == "describe"]
    assert pace["setting"] == "paced to 6% of the time", sched["knobs"]  # it was, when the run stopped
    events = [m.data for m in words.items if m.kind == "event"]
    assert events[-1]["stop_reason"] == "cancelled", events  # it was writing: cut short, reported
    assert report.duration_s < 4.0 + 1.0
