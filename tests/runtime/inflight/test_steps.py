"""Two-step stages: prepare() of the next item overlaps process() of the last, two deep."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import AsyncIterator

import pytest

from edgepipe import NodeError, Pipeline
from edgepipe.core.lease import Leased
from edgepipe.graph.types import declared_types
from edgepipe.runner import RunConfig
from edgepipe.testing import FakeSource, ListSink, run_pipeline


class Item(Leased):
    def __init__(self, n: int, freed: list[int]) -> None:
        super().__init__()
        self.n = n
        self.freed = freed

    def _free(self) -> None:
        self.freed.append(self.n)


class Ready(Leased):
    """What prepare() makes: holds its input's lease until processed."""

    def __init__(self, item: Item, freed: list[str]) -> None:
        super().__init__()
        item.retain()
        self.item = item
        self.freed = freed

    def _free(self) -> None:
        self.freed.append(f"ready{self.item.n}")
        self.item.release()


class TwoStep:
    def __init__(
        self,
        step_s: float = 0.03,
        fail_prepare: int = -1,
        fail_process: int = -1,
        *,
        prepare_s: float | None = None,
        process_s: float | None = None,
    ) -> None:
        self.prepare_s = step_s if prepare_s is None else prepare_s
        self.process_s = step_s if process_s is None else process_s
        self.fail_prepare = fail_prepare
        self.fail_process = fail_process
        self.prepares: list[tuple[float, float]] = []
        self.processes: list[tuple[float, float]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.ready_freed: list[str] = []

    def prepare(self, item: Item) -> Ready:
        if item.n == self.fail_prepare:
            raise RuntimeError(f"prepare failed on {item.n}")
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        t0 = time.perf_counter()
        time.sleep(self.prepare_s)
        self.prepares.append((t0, time.perf_counter()))
        return Ready(item, self.ready_freed)

    def process(self, ready: Ready) -> int:
        t0 = time.perf_counter()
        try:
            time.sleep(self.process_s)
            if ready.item.n == self.fail_process:
                raise RuntimeError(f"process failed on {ready.item.n}")
            return ready.item.n * 10
        finally:
            self.processes.append((t0, time.perf_counter()))
            with self.lock:
                self.in_flight -= 1

    @property
    def overlapped(self) -> int:
        """Preparations that ran (mostly) while a process() ran."""
        return sum(
            any(min(b, d) - max(a, c) > (b - a) / 2 for c, d in self.processes) for a, b in self.prepares
        )


def run_two_step(stage: TwoStep, count: int = 8, policy: str = "block", on_error: str = "skip"):  # type: ignore[no-untyped-def]
    freed: list[int] = []
    sink: ListSink[int] = ListSink()
    p = Pipeline("t")
    src = p.source("items", FakeSource([Item(i, freed) for i in range(count)]))
    p.sink(
        "out", sink, inputs=p.stage("two", stage, inputs=src, policy=policy, queue_size=8, on_error=on_error)
    )
    report = run_pipeline(p, RunConfig(governed=False))
    return sink.items, freed, report


def test_prepare_overlaps_process_in_order_and_two_deep() -> None:
    stage = TwoStep()
    out, freed, report = run_two_step(stage)
    assert out == [n * 10 for n in range(8)]
    assert stage.overlapped >= 4  # most prepares ran while the previous item was processed
    assert stage.max_in_flight <= 2  # one being prepared, one being processed: no deeper
    assert sorted(freed) == list(range(8))  # every input's lease came back
    assert len(stage.ready_freed) == 8
    assert report.stats.node("two").items_in == 8


def run_live(stage: TwoStep, count: int, interval_s: float):  # type: ignore[no-untyped-def]
    """A source of ``count`` items ``interval_s`` apart into a latest/1 lane of ``stage``."""
    freed: list[int] = []
    sink: ListSink[int] = ListSink()
    p = Pipeline("t")
    src = p.source("items", FakeSource([Item(i, freed) for i in range(count)], interval_s=interval_s))
    p.sink("out", sink, inputs=p.stage("two", stage, inputs=src, policy="latest", queue_size=1))
    report = run_pipeline(p, RunConfig(governed=False))
    return sink.items, freed, report


@pytest.mark.slow
def test_a_latest_inbox_overlaps_too_and_the_model_never_waits() -> None:
    # Items every 5 ms, preparing takes 10 ms and processing 40 ms: the newest item is prepared
    # while the model runs, so the model goes back to back: about 40 ms a result, not 50.
    stage = TwoStep(prepare_s=0.010, process_s=0.040)
    t0 = time.monotonic()
    out, freed, _ = run_live(stage, count=150, interval_s=0.005)
    elapsed = time.monotonic() - t0
    assert stage.overlapped >= len(out) // 2  # prepared while the last one was processed
    assert stage.max_in_flight <= 2
    assert out == sorted(out)  # newest first, never out of order
    assert len(out) >= 5
    # Back to back, the steps would give one result per 50 ms at best.
    assert len(out) > elapsed / 0.050
    assert sorted(freed) == list(range(150))  # every input's lease came back, dropped or not
    assert len(stage.ready_freed) == len(out)  # every prepared item was processed


@pytest.mark.slow
def test_a_live_frame_is_prepared_just_in_time_and_every_prepared_one_is_processed() -> None:
    # Frames every 5 ms; the model takes 40-60 ms (jitter), preparing 5 ms. The preparer hands
    # out 3 buffers in turn (2 + 1 for an abandoned call, the documented contract): none may be
    # rewritten while the model still reads it, whatever the jitter. The frame the model gets
    # is recent: prepared shortly before the model needed it, not a whole run earlier.
    produced: list[int] = []

    class RoundRobin:
        def __init__(self) -> None:
            self.buffers = [[-1], [-1], [-1]]
            self.turn = 0
            self.corrupted = 0
            self.ages: list[int] = []
            self.prepared = 0

        def prepare(self, item: Item) -> tuple[list[int], int]:
            buffer = self.buffers[self.turn]
            self.turn = (self.turn + 1) % 3
            buffer[0] = item.n
            time.sleep(0.005)
            self.prepared += 1
            return buffer, item.n

        def process(self, ready: tuple[list[int], int]) -> int:
            buffer, n = ready
            self.ages.append(produced[-1] - n)
            time.sleep(0.040 + 0.020 * ((n * 7919) % 10) / 10)
            if buffer[0] != n:
                self.corrupted += 1
            return n

    async def frames() -> AsyncIterator[Item]:
        for n in range(300):
            produced.append(n)
            yield Item(n, [])
            await asyncio.sleep(0.005)

    stage = RoundRobin()
    sink: ListSink[int] = ListSink()
    p = Pipeline("t")
    src = p.source("items", frames)
    p.sink("out", sink, inputs=p.stage("two", stage, inputs=src, policy="latest", queue_size=1))
    run_pipeline(p, RunConfig(governed=False))
    assert len(sink.items) > 15
    assert stage.corrupted == 0
    assert stage.prepared == len(sink.items)  # nothing prepared only to be thrown away
    # Just in time: a few frames old (one preparation, the jitter lead), not a whole run (~10).
    assert statistics.median(stage.ages) <= 6


def test_failures_in_either_step_skip_that_item_and_free_it() -> None:
    stage = TwoStep(step_s=0.005, fail_prepare=2, fail_process=5)
    out, freed, report = run_two_step(stage)
    assert out == [0, 10, 30, 40, 60, 70]
    assert report.stats.node("two").errors == 2
    assert sorted(freed) == list(range(8))


def test_stop_policy_stops_the_run_with_the_nodes_error() -> None:
    with pytest.raises(NodeError, match=r"node 'two'.*process failed on 3"):
        run_two_step(TwoStep(step_s=0.005, fail_process=3), on_error="stop")


def test_the_item_type_is_what_prepare_takes() -> None:
    assert declared_types(TwoStep(), "stage") == (Item, int)


def test_late_results_of_abandoned_calls_are_released() -> None:
    # prepare() of item 1 runs past the node's deadline: it is abandoned, and the Ready it
    # returns later (holding item 1's lease) must be let go; so must a late process() output.
    class Late(TwoStep):
        def prepare(self, item: Item) -> Ready:
            if item.n == 1:
                time.sleep(0.3)
            return Ready(item, self.ready_freed)

        def process(self, ready: Ready) -> Ready:  # type: ignore[override]
            if ready.item.n == 2:
                time.sleep(0.3)
            return Ready(ready.item, self.ready_freed)

    freed: list[int] = []
    p = Pipeline("t")
    src = p.source("items", FakeSource([Item(i, freed) for i in range(4)]))
    p.sink("out", ListSink(), inputs=p.stage("two", Late(step_s=0.0), inputs=src, timeout_s=0.1))
    report = run_pipeline(p, RunConfig(governed=False))
    assert report.stats.node("two").errors == 2
    deadline = time.monotonic() + 3
    while sorted(freed) != list(range(4)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(freed) == list(range(4))
