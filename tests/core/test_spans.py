"""Spans for ``edgepipe trace``: off by default; a run given a recorder keeps every call of every node."""

from __future__ import annotations

import time

import pytest

from edgepipe import Pipeline
from edgepipe.core import spans
from edgepipe.core.spans import CALL, NEXT_ITEM, PREPARE, PROCESS, STEPS, SpanLog
from edgepipe.runner import RunConfig
from edgepipe.runtime.metrics import NodeMetrics
from edgepipe.testing import FakeSource, ListSink, run_pipeline


@pytest.fixture
def recording() -> spans.SpanRecorder:
    return spans.SpanRecorder()


def test_off_unless_recording() -> None:
    assert NodeMetrics("a", "stage").spans is None


class TwoStep:
    def prepare(self, n: int) -> int:
        time.sleep(0.002)
        return n

    def process(self, n: int) -> int:
        time.sleep(0.004)
        return n


def test_every_call_of_every_node_is_a_span(recording: spans.SpanRecorder) -> None:
    sink: ListSink[int] = ListSink()
    p = Pipeline("t")
    src = p.source("items", FakeSource(list(range(6))))
    double = p.stage("double", lambda n: n * 2, inputs=src)
    two = p.stage("two", TwoStep(), inputs=double)
    p.sink("out", sink, inputs=two)
    t0 = time.perf_counter_ns()
    run_pipeline(p, RunConfig(governed=False, spans=recording))
    t1 = time.perf_counter_ns()
    assert sink.items == [0, 2, 4, 6, 8, 10]
    logs = recording.logs
    assert set(logs) == {"items", "double", "two", "out"}
    assert [STEPS[s] for s in logs["items"].steps] == [STEPS[NEXT_ITEM]] * 6
    assert list(logs["double"].steps) == [CALL] * 6
    assert sorted(logs["two"].steps) == [PREPARE] * 6 + [PROCESS] * 6
    assert len(logs["out"]) == 6
    for log in logs.values():
        assert all(d >= 0 for d in log.durations_ns)
        assert all(t0 <= s <= t1 for s in log.starts_ns)
    process = [d for d, s in zip(logs["two"].durations_ns, logs["two"].steps, strict=True) if s == PROCESS]
    assert min(process) >= 4_000_000  # each process() slept 4 ms: the span covers the call


def test_past_its_limit_a_log_counts_only() -> None:
    log = SpanLog("n", limit=2)
    for i in range(5):
        log.add(CALL, i, i + 1)
    assert len(log) == 2
    assert log.dropped == 3
    assert log.add_until_now(CALL, 0) > 0


def test_a_source_s_wait_is_its_own_not_the_downstream_backpressure(recording: spans.SpanRecorder) -> None:
    sink: ListSink[int] = ListSink()
    p = Pipeline("t")
    src = p.source("items", FakeSource(list(range(12))))  # in memory: gives each item at once
    slow = p.stage("slow", lambda n: time.sleep(0.01) or n, inputs=src, queue_size=1)
    p.sink("out", sink, inputs=slow)
    run_pipeline(p, RunConfig(governed=False, spans=recording))
    assert len(sink.items) == 12
    logs = recording.logs
    waited = sum(logs["items"].durations_ns)
    worked = sum(logs["slow"].durations_ns)
    assert worked >= 12 * 10_000_000
    # a full queue ahead of the source holds it in emit(): that time is not its "next item"
    assert waited < worked / 4


def _looking(seen: list[object]) -> Pipeline:
    p = Pipeline("t")
    look = p.stage(
        "look", lambda n: seen.append(spans.SPANS.get()) or n, inputs=p.source("items", FakeSource([1, 2]))
    )
    p.sink("out", ListSink(), inputs=look)
    return p


def test_the_recorder_is_the_runs_own_where_its_code_runs(recording: spans.SpanRecorder) -> None:
    seen: list[object] = []
    run_pipeline(_looking(seen), RunConfig(governed=False, spans=recording))
    assert seen == [recording, recording]
    seen.clear()
    run_pipeline(
        _looking(seen), RunConfig(governed=False)
    )  # a run not traced, and code outside any run: none
    assert seen == [None, None]
    assert spans.SPANS.get() is None
