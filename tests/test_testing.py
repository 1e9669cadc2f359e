from __future__ import annotations

from edgepipe import Pipeline
from edgepipe.runner import RunConfig
from edgepipe.testing import FakeSource, ListSink, run_pipeline


def test_fake_source_list_sink_and_run_pipeline() -> None:
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("numbers", FakeSource([1, 2, 3], interval_s=0.001))
    p.sink("out", out, inputs=p.stage("double", lambda x: x * 2, inputs=src))
    report = run_pipeline(p, RunConfig(governed=False))
    assert out.items == [2, 4, 6]
    assert out.started
    assert out.stopped
    assert report.stats.node("double").items_out == 3


def test_repeating_source_runs_for_a_duration() -> None:
    out: ListSink[int] = ListSink()
    p = Pipeline()
    p.sink("out", out, inputs=p.source("n", FakeSource([1], repeat=True, interval_s=0.005)))
    report = run_pipeline(p, RunConfig(governed=False, duration_s=0.2))
    assert report.stopped_by == "stop"
    assert 5 < len(out.items) < 100
