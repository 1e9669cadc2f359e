"""Calls in flight: the runs queued behind the ones under way, deadlines, abandonment, order."""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from edgepipe import Pipeline
from edgepipe.core.context import current_node
from edgepipe.core.errors import NodeStuck
from edgepipe.core.lease import Leased
from edgepipe.graph.spec import ErrorPolicy
from edgepipe.runner import RunConfig
from edgepipe.runtime.engine import Runtime
from edgepipe.runtime.inflight.flight import MAX_HUNG_THREADS
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
    return out.items, run_pipeline(p, RunConfig(governed=False))


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
    run_pipeline(p, RunConfig(governed=False))
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
    report = run_pipeline(p, RunConfig(governed=False))
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
        run_pipeline(p, RunConfig(governed=False))
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
    report = run_pipeline(p, RunConfig(governed=False))
    assert report.stopped_by == "end"
    assert out.items[-1] == 299


# -- several calls in flight -------------------------------------------------------------------


class Item(Leased):
    """A pooled item of one lane: says when it is given back."""

    def __init__(self, lane: str, n: int, freed: list[tuple[str, int]]) -> None:
        super().__init__()
        self.lane, self.n, self.freed = lane, n, freed

    def _free(self) -> None:
        self.freed.append((self.lane, self.n))


def two_lanes(count: int, freed: list[tuple[str, int]]) -> tuple[FakeSource[Item], FakeSource[Item]]:
    return (FakeSource([Item("a", i, freed) for i in range(count)]),
            FakeSource([Item("b", i, freed) for i in range(count)]))  # fmt: skip


class Concurrent:
    """process() takes a random while (seeded) and records how many calls run at once."""

    def __init__(self, seed: int = 1, fail: tuple[str, int] | None = None) -> None:
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.fail = fail

    def process(self, item: Item) -> tuple[str, int]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            pause = self.random.uniform(0, 0.02)
        try:
            time.sleep(pause)
            if (item.lane, item.n) == self.fail:
                raise ValueError(f"item {item.n} of lane {item.lane} is broken")
            return (item.lane, item.n)
        finally:
            with self.lock:
                self.running -= 1


def run_two_lanes(code: Any, count: int, *, instances: int, **stage: Any) -> tuple[list[Any], Any, list[Any]]:
    freed: list[tuple[str, int]] = []
    out: ListSink[Any] = ListSink()
    a, b = two_lanes(count, freed)
    p = Pipeline()
    lanes = [p.source("a", a), p.source("b", b)]
    p.sink("out", out, inputs=p.stage("work", code, inputs=lanes, instances=instances, **stage))
    return out.items, run_pipeline(p, RunConfig(governed=False)), freed


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_results_leave_in_each_lanes_order_whatever_order_the_calls_end_in(seed: int) -> None:
    code = Concurrent(seed)
    items, report, freed = run_two_lanes(code, 40, instances=3)
    for lane in "ab":
        assert [n for name, n in items if name == lane] == list(range(40)), (
            f"lane {lane}: in order, once each"
        )
    assert code.most == 3, "three calls ran at once"
    assert sorted(freed) == sorted((lane, n) for lane in "ab" for n in range(40))
    node = report.stats.node("work")
    assert (node.instances, node.in_flight, node.errors) == (3, 0, 0)


def test_an_exception_in_one_of_the_calls_skips_that_item_only() -> None:
    code = Concurrent(fail=("b", 7))
    items, report, freed = run_two_lanes(code, 20, instances=2)
    assert report.stats.node("work").errors == 1
    assert [n for name, n in items if name == "a"] == list(range(20))
    assert [n for name, n in items if name == "b"] == [n for n in range(20) if n != 7]
    assert len(freed) == 40, "every item went back, the failed one too"


def test_a_call_past_its_deadline_is_abandoned_and_the_others_go_on_with_a_fresh_thread() -> None:
    release = threading.Event()

    class Hangs(Concurrent):
        def process(self, item: Item) -> tuple[str, int]:
            if (item.lane, item.n) == ("a", 3):
                release.wait(10)  # far past the deadline
            return super().process(item)

    code = Hangs()
    try:
        items, report, freed = run_two_lanes(code, 20, instances=2, timeout_s=0.3)
    finally:
        release.set()
    assert report.stats.node("work").errors == 1
    assert [n for name, n in items if name == "a"] == [n for n in range(20) if n != 3]
    assert [n for name, n in items if name == "b"] == list(range(20))
    assert code.most == 2, "with one call hung, two still ran at once: a fresh thread took its place"
    deadline = time.monotonic() + 5
    while len(freed) < 40 and time.monotonic() < deadline:  # the hung call keeps its item until it returns
        time.sleep(0.01)
    assert len(freed) == 40


def test_a_stop_while_calls_are_in_flight_loses_and_repeats_nothing() -> None:
    # A camera-like source that never ends; the run stops while both calls are under way.
    freed: list[tuple[str, int]] = []
    started: list[int] = []

    async def endless() -> AsyncIterator[Item]:
        n = 0
        while True:
            yield Item("a", n, freed)
            n += 1
            await asyncio.sleep(0.002)

    class Slow:
        def process(self, item: Item) -> int:
            started.append(item.n)
            time.sleep(0.05)
            return item.n

    out: ListSink[int] = ListSink()
    p = Pipeline()
    p.sink("out", out, inputs=p.stage("work", Slow(), inputs=p.source("a", endless), instances=2,
                                      queue_size=4))  # fmt: skip
    report = run_pipeline(p, RunConfig(governed=False, duration_s=0.5))
    assert report.stopped_by == "stop"
    assert out.items == sorted(set(out.items)), "in order, none twice"
    assert sorted(out.items) == sorted(started), "every call that started was collected"
    taken = report.stats.node("work").items_in
    assert len(out.items) == taken, "what the node took it finished: the drain ended the calls in flight"
    assert sorted(n for _, n in freed) == list(range(len(freed))), "every item made went back"


class Frames:
    """A detector in miniature: lane 'slow' has model frames that run until the test says so,
    lane 'quick' only frames the tracker carries; finish() records the order it sees."""

    def __init__(self, go: threading.Event) -> None:
        self.go = go
        self.finished: list[tuple[str, int]] = []

    def prepare(self, item: Item) -> Item:
        item.light = item.lane == "quick" or item.n % 4 != 0  # type: ignore[attr-defined]
        return item

    def process(self, item: Item) -> Item:
        if item.lane == "slow":
            assert self.go.wait(10), "the test never let the model run end"
        return item

    def finish(self, item: Item) -> tuple[str, int]:
        self.finished.append((item.lane, item.n))
        return (item.lane, item.n)


def test_carried_frames_of_one_camera_never_wait_behind_another_cameras_model_run() -> None:
    # The model run of lane 'slow' ends only once lane 'quick' has all of its results out: if
    # the quick lane's carried frames waited behind it, the run would never end (a deadlock the
    # test's wait turns into a failure).
    go = threading.Event()
    code = Frames(go)
    freed: list[tuple[str, int]] = []
    out_items: list[tuple[str, int]] = []

    async def sink(item: tuple[str, int]) -> None:
        out_items.append(item)
        if sum(1 for lane, _ in out_items if lane == "quick") == 12:
            go.set()

    p = Pipeline()
    lanes = [p.source("slow", FakeSource([Item("slow", i, freed) for i in range(8)])),
             p.source("quick", FakeSource([Item("quick", i, freed) for i in range(12)], interval_s=0.002))]  # fmt: skip
    p.sink("out", sink, inputs=p.stage("work", code, inputs=lanes, instances=1))
    report = run_pipeline(p, RunConfig(governed=False))
    assert go.is_set()
    assert report.stats.node("work").errors == 0
    slow = [n for lane, n in out_items if lane == "slow"]
    assert slow == list(range(8)), "a lane's carried frames waited for its own model run, in order"
    assert out_items.index(("quick", 11)) < out_items.index(("slow", 0))
    assert code.finished == out_items, "finish() saw each lane's items in order, as they left"
    assert len(freed) == 20


def test_fewer_calls_run_while_the_governor_allows_fewer() -> None:
    code = Concurrent()
    p = Pipeline()
    freed: list[tuple[str, int]] = []
    a, b = two_lanes(30, freed)
    out: ListSink[Any] = ListSink()
    p.sink("out", out, inputs=p.stage("work", code, inputs=[p.source("a", a), p.source("b", b)], instances=3))
    graph = p.validate()
    runtime = Runtime(graph)
    runtime.runners["work"].calls.shed(2)  # what an InstancesKnob does under CPU pressure
    asyncio.run(runtime.run())
    assert code.most == 1
    assert len(out.items) == 60


def test_a_second_call_the_node_says_would_not_start_is_held_back_until_it_would() -> None:
    # A detector's second call paced by the CPU budget's gate: the runtime holds it (prepared)
    # rather than start it on a thread where it would only wait.
    class Paced(Concurrent):
        may_overlap = False

        async def start(self) -> None:
            current_node().calls.ready = lambda: self.may_overlap

    code = Paced()
    items, _, _ = run_two_lanes(code, 15, instances=2)
    assert len(items) == 30
    assert code.most == 1, "no second call while the node says it would not start"
    code = Paced()
    code.may_overlap = True
    items, _, _ = run_two_lanes(code, 15, instances=2)
    assert code.most == 2
