"""Calls in flight: the runs queued behind the ones under way, deadlines, abandonment, order."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
from collections.abc import AsyncIterator

import pytest

from edgepipe import Pipeline
from edgepipe.core.errors import NodeStuck
from edgepipe.graph.spec import ErrorPolicy
from edgepipe.runtime.flight import MAX_HUNG_THREADS
from edgepipe.testing import FakeSource, ListSink, run_pipeline


class Steps:
    """prepare() is quick, process() takes ``process_s``; records where and when each ran."""

    def __init__(self, process_s: float) -> None:
        self.process_s = process_s
        self.runs: list[tuple[float, float]] = []
        self.threads: set[int] = set()

    def prepare(self, item: int) -> int:
        time.sleep(0.001)
        return item

    def process(self, item: int) -> int:
        t0 = time.perf_counter()
        self.threads.add(threading.get_ident())
        time.sleep(self.process_s)
        self.runs.append((t0, time.perf_counter()))
        return item


def run(steps: Steps, count: int, policy: str = "block", timeout_s: float | None = None):  # type: ignore[no-untyped-def]
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(count)))
    p.sink("out", out, inputs=p.stage("steps", steps, inputs=src, policy=policy, timeout_s=timeout_s))
    return out.items, run_pipeline(p)


@pytest.mark.slow
def test_runs_go_back_to_back_on_one_thread_even_while_the_loop_is_busy() -> None:
    # The next run is queued on the thread behind the current one: it starts when the last
    # ends, not when the event loop has heard of that and handed the next one over. Here the
    # loop is busy for 10 ms with each result (a badly written sink): the model never waits.
    steps = Steps(process_s=0.02)
    got: list[int] = []

    def hog_the_loop(item: int) -> None:
        time.sleep(0.01)
        got.append(item)

    p = Pipeline()
    src = p.source("src", FakeSource(range(25)))
    p.sink("hog", hog_the_loop, inputs=p.stage("steps", steps, inputs=src), on_loop=True)
    run_pipeline(p)
    assert got == list(range(25))
    assert len(steps.threads) == 1
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(steps.runs)]
    assert statistics.median(gaps) < 0.003


@pytest.mark.slow
def test_a_deadline_counts_from_when_a_run_starts_not_while_it_is_queued() -> None:
    # Each run takes 0.1 s with a 0.15 s deadline: a run queued behind another waits up to
    # 0.1 s first, which must not count against it.
    steps = Steps(process_s=0.1)
    items, report = run(steps, count=6, timeout_s=0.15)
    assert report.stats.node("steps").errors == 0
    assert items == list(range(6))


def test_a_run_past_its_deadline_is_abandoned_and_a_fresh_thread_goes_on() -> None:
    class Hangs(Steps):
        def process(self, item: int) -> int:
            if item == 2:
                time.sleep(0.5)  # far past the deadline
            return super().process(item)

    steps = Hangs(process_s=0.01)
    items, report = run(steps, count=8, timeout_s=0.2)
    assert report.stats.node("steps").errors == 1
    assert items == [0, 1, 3, 4, 5, 6, 7]  # the queued item went on, on a new thread, in order
    assert len(steps.threads) == 2


@pytest.mark.slow
def test_a_run_given_to_an_idle_thread_is_timed_from_then() -> None:
    # The sink stalls once, so results wait to be collected; a run handed to the thread after
    # the last one ended (and before the loop collected it) starts then, not at that end.
    steps = Steps(process_s=0.2)
    got: list[int] = []
    t0 = time.perf_counter()

    async def source() -> AsyncIterator[int]:
        for i, at in enumerate([0, 0, 0, 0.45, 1.1, 1.6]):
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
            yield i

    async def slow_sink(item: int) -> None:
        if item == 0:
            await asyncio.sleep(1.0)  # one stall downstream (a flush, a reconnect)
        got.append(item)

    p = Pipeline()
    p.sink("sink", slow_sink, inputs=p.stage("steps", steps, inputs=p.source("src", source), timeout_s=0.3),
           queue_size=1)  # fmt: skip
    report = run_pipeline(p)
    assert report.stats.node("steps").errors == 0
    assert got == list(range(6))


def test_a_node_whose_runs_keep_hanging_stops_the_run_instead_of_piling_up_threads() -> None:
    class Hangs(Steps):
        def process(self, item: int) -> int:
            time.sleep(1.0)
            return item

    p = Pipeline()
    src = p.source("src", FakeSource(range(100), interval_s=0.001))
    never_open = ErrorPolicy(open_after=1000)
    p.sink(
        "out", ListSink(), inputs=p.stage("hangs", Hangs(0), inputs=src, timeout_s=0.02, on_error=never_open)
    )
    before = set(threading.enumerate())
    with pytest.raises(
        NodeStuck, match=rf"node 'hangs'.*{MAX_HUNG_THREADS} of its threads have not returned"
    ):
        run_pipeline(p)
    left = [t for t in threading.enumerate() if t not in before and "hangs" in t.name]
    assert MAX_HUNG_THREADS <= len(left) <= MAX_HUNG_THREADS + 1, [t.name for t in left]


@pytest.mark.slow
def test_a_stall_that_passes_is_ridden_out_by_the_circuit() -> None:
    # The model hangs for 1.2 s (a device reset) with a 0.1 s deadline: runs are abandoned and
    # the circuit opens, but the hung threads return when the stall ends, and the run goes on.
    t0 = time.monotonic()

    class Stalls(Steps):
        def process(self, item: int) -> int:
            now = time.monotonic() - t0
            if 0.2 <= now < 1.4:
                time.sleep(1.4 - now)
            return super().process(item)

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(300), interval_s=0.01))
    policy = ErrorPolicy(open_after=5, cooldown_s=0.1, cooldown_max_s=3.0)
    p.sink("out", out, inputs=p.stage("det", Stalls(0.005), inputs=src, timeout_s=0.1, on_error=policy))
    report = run_pipeline(p)
    assert report.stopped_by == "end"
    assert out.items[-1] == 299
