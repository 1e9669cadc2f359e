"""Node-level behaviour: pooled items (leases) across every path, deadlines on thread calls,
stop hooks, and sources that fail or stall."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest

from edgepipe import Pipeline
from edgepipe.core.context import current_node
from edgepipe.core.lease import Leased
from edgepipe.graph.pipeline import ErrorPolicy, OnError
from edgepipe.runner import RunConfig, run, run_async
from edgepipe.testing import FakeSource, ListSink


class Slot(Leased):
    """A pooled item that records when its last holder lets go."""

    freed: ClassVar[list[int]] = []

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def _free(self) -> None:
        Slot.freed.append(self.n)


async def test_pooled_items_go_back_exactly_once_whatever_path_they_take() -> None:
    Slot.freed.clear()
    kept: list[Slot] = []

    async def pooled() -> AsyncIterator[Slot]:
        for i in range(300):
            yield Slot(i)
            if i % 10 == 0:
                await asyncio.sleep(0.001)

    async def passthrough(item: Slot) -> Slot | None:
        return item if item.n % 3 else None  # returns the input, or drops it

    async def stream(items: AsyncIterator[Slot]) -> AsyncIterator[int]:
        async for item in items:
            if item.n == 7:
                item.retain()  # kept past the call, released by hand below
                kept.append(item)
            yield item.n

    async def slow(item: Slot) -> None:
        await asyncio.sleep(0.002)

    p = Pipeline()
    src = p.source("src", pooled)
    through = p.stage("through", passthrough, inputs=src)
    p.sink("slow", slow, inputs=[src, through], policy="latest", queue_size=2)  # drops most
    p.sink("numbers", ListSink(), inputs=p.stage("stream", stream, inputs=src))
    p.sink("broken", lambda item: 1 / (item.n % 2), inputs=through)  # fails on half, skip policy
    report = await run_async(p, RunConfig(governed=False))
    assert sum(c.dropped for c in report.stats.inbox("slow")) > 0
    assert 7 not in Slot.freed
    kept[0].release()
    assert sorted(Slot.freed) == list(range(300))  # each freed once, none leaked


@pytest.mark.slow
async def test_a_stop_hook_slower_than_the_drain_deadline_still_finishes_and_the_run_ends() -> None:
    class SlowToClose:
        closed = False

        def __aiter__(self) -> AsyncIterator[int]:
            return FakeSource(range(1000), interval_s=0.01).__aiter__()

        async def stop(self) -> None:
            await asyncio.sleep(0.4)  # longer than the drain deadline below, within the grace after it
            SlowToClose.closed = True

    p = Pipeline()
    p.sink("out", ListSink(), inputs=p.source("src", SlowToClose()))
    t0 = time.monotonic()
    report = await asyncio.wait_for(
        run_async(p, RunConfig(governed=False, duration_s=0.1, drain_timeout_s=0.2)), 10
    )
    assert report.stopped_by == "forced"
    assert SlowToClose.closed  # a forced stop spares a running stop() hook (sinks flush there)
    assert time.monotonic() - t0 < 5


async def test_stop_hook_is_not_starved_by_the_blocking_read_it_interrupts() -> None:
    class Camera:
        def __init__(self) -> None:
            self.wake = threading.Event()

        def __iter__(self) -> Iterator[int]:
            n = 0
            while not self.wake.is_set():
                self.wake.wait(0.01 if n < 3 else 30)  # then blocks, like a camera with no frame
                n += 1
                yield n

        def stop(self) -> None:
            self.wake.set()

    p = Pipeline()
    p.sink("out", ListSink(), inputs=p.source("cam", Camera(), resource="vdec"))  # alone on its thread
    report = await asyncio.wait_for(
        run_async(p, RunConfig(governed=False, duration_s=0.3, drain_timeout_s=2)), 10
    )
    assert report.stopped_by == "stop"


async def test_an_abandoned_call_does_not_make_the_next_ones_time_out() -> None:
    def sometimes_slow(x: int) -> int:
        time.sleep(1.0 if x == 0 else 0.01)
        return x

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(8)))
    p.sink("out", out, inputs=p.stage("npu", sometimes_slow, inputs=src, resource="npu", timeout_s=0.2))
    report = await run_async(p, RunConfig(governed=False))
    assert out.items == list(range(1, 8))
    assert report.stats.node("npu").errors == 1


@pytest.mark.slow
async def test_a_pooled_item_stays_leased_to_an_abandoned_thread() -> None:
    Slot.freed.clear()
    seen_freed: list[bool] = []

    def slow_reader(item: Slot) -> None:
        time.sleep(0.3)
        seen_freed.append(item.n in Slot.freed)  # is its buffer still ours while we read it?

    async def one() -> AsyncIterator[Slot]:
        yield Slot(0)

    p = Pipeline()
    p.sink("reader", slow_reader, inputs=p.source("src", one), timeout_s=0.1)
    await run_async(p, RunConfig(governed=False))
    await asyncio.sleep(0.5)
    assert seen_freed == [False]
    assert Slot.freed == [0]  # and it is given back once the thread is done


async def test_a_stream_stage_that_yields_its_input_then_more_does_not_free_it_early() -> None:
    Slot.freed.clear()
    states: list[bool] = []

    async def pooled() -> AsyncIterator[Slot]:
        for i in range(5):
            yield Slot(i)

    async def annotate(items: AsyncIterator[Slot]) -> AsyncIterator[object]:
        async for item in items:
            yield item
            yield {"kind": "event", "n": item.n}

    async def check(item: object) -> None:
        await asyncio.sleep(0.01)
        if isinstance(item, Slot):
            states.append(item.n in Slot.freed)

    p = Pipeline()
    p.sink("check", check, inputs=p.stage("annotate", annotate, inputs=p.source("src", pooled)))
    await run_async(p, RunConfig(governed=False))
    assert states == [False] * 5
    assert sorted(Slot.freed) == list(range(5))


async def test_an_unencodable_result_is_recorded_not_fatal(tmp_path: Path) -> None:
    class Weird:
        def to_dict(self) -> dict[str, int]:
            raise KeyError("nope")

    path = tmp_path / "r.jsonl"
    p = Pipeline()
    p.sink("out", ListSink(), inputs=p.stage("weird", lambda x: Weird(), inputs=p.source("src", [1, 2])))
    await run_async(p, RunConfig(governed=False, results_path=str(path)))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2
    assert "KeyError" in records[0]["data"]["error"]


@pytest.mark.slow
async def test_a_flapping_source_under_skip_backs_off_instead_of_spinning() -> None:
    class Flaky:
        opened = 0

        async def __aiter__(self) -> AsyncIterator[int]:
            Flaky.opened += 1
            yield 1
            raise RuntimeError("lost")

    p = Pipeline()
    policy = ErrorPolicy(OnError.SKIP, backoff_initial_s=0.05, backoff_max_s=0.05)
    p.sink("out", ListSink(), inputs=p.source("src", Flaky(), on_error=policy), policy="latest")
    report = await asyncio.wait_for(run_async(p, RunConfig(governed=False, duration_s=0.5)), 10)
    assert report.stopped_by == "stop"
    assert 3 <= Flaky.opened <= 15  # reopened every 50 ms, not 300 000 times a second


@pytest.mark.slow
async def test_source_timeout_turns_a_silent_stall_into_a_restart() -> None:
    class Stalls:
        opened = 0

        async def __aiter__(self) -> AsyncIterator[int]:
            Stalls.opened += 1
            yield 1
            await asyncio.sleep(3600)
            yield 2

    out: ListSink[int] = ListSink()
    p = Pipeline()
    policy = ErrorPolicy(OnError.RESTART, backoff_initial_s=0.01)
    p.sink("out", out, inputs=p.source("src", Stalls(), timeout_s=0.1, on_error=policy))
    report = await asyncio.wait_for(run_async(p, RunConfig(governed=False, duration_s=0.6)), 10)
    assert Stalls.opened >= 3
    assert report.stats.node("src").errors >= 2


async def test_a_source_learns_how_many_items_each_consumer_can_hold() -> None:
    # A pool feeding these consumers needs their sum: the lane, plus the item in hand; with
    # calls in flight (a two-step stage), the call, the one waiting behind it and the one being
    # prepared or emitted (instances + 2); or a batch.
    holds: list[tuple[int, ...]] = []

    async def source() -> AsyncIterator[int]:
        holds.append(current_node().consumer_holds)
        yield 1

    class TwoStep:
        def prepare(self, item: int) -> int:
            return item

        def process(self, item: int) -> int:
            return item

    class Batched(TwoStep):
        batch_size = 4

        def process_batch(self, items: list[int]) -> list[int]:
            return items

    p = Pipeline()
    src = p.source("src", source)
    p.sink("plain", ListSink(), inputs=src, policy="latest", queue_size=1)
    p.sink("two_step", TwoStep(), inputs=src, policy="latest", queue_size=1)
    p.sink("restarting", TwoStep(), inputs=src, policy="latest", queue_size=1, on_error="restart")
    p.sink("batched", Batched(), inputs=src, queue_size=8)
    await run_async(p, RunConfig(governed=False))
    assert holds == [(2, 4, 2, 12)]


def test_a_sync_start_hook_knows_its_node_and_its_cpu_is_the_nodes_setup() -> None:
    # A Recorder's sync start() names itself the owner of its encodes: it must see its node.
    from edgepipe.core import cputime

    seen: list[str] = []

    class Sink:
        def start(self) -> None:
            seen.append(current_node().node_id)
            end = time.thread_time() + 0.01
            while time.thread_time() < end:
                pass

        def process(self, item: int) -> None:
            pass

    p = Pipeline()
    p.sink("writer", Sink(), inputs=p.source("src", FakeSource([1])))
    run(p, RunConfig(governed=False))
    assert seen == ["writer"]
    ended, accounts = cputime.collect()
    setup = ended.get(("writer", cputime.SETUP), 0) + sum(
        a.done.get(("writer", cputime.SETUP), 0) for a in accounts
    )
    assert setup >= 0.009e9


async def test_a_node_knows_its_pipeline_and_the_states_of_the_sources_upstream() -> None:
    status = SimpleNamespace(state_info=("live", ""))
    camera = FakeSource([1, 2])
    camera.status = status  # type: ignore[attr-defined]  # as a VideoSource's SourceStatus
    seen: dict[str, tuple[str, dict[str, object]]] = {}

    class Probe:
        async def start(self) -> None:
            ctx = current_node()
            seen[ctx.node_id] = (ctx.pipeline, dict(ctx.sources))

        async def process(self, item: int) -> int:
            return item

    p = Pipeline("probe")
    mid = p.stage("mid", Probe(), inputs=p.source("camera", camera))
    p.sink("out", Probe(), inputs=[mid, p.source("plain", FakeSource([3]))])  # no status: not listed
    p.sink("alone", Probe(), inputs="plain")
    await run_async(p, RunConfig(governed=False))
    assert seen == {  # old code: no pipeline, no sources (they were passed to each node by hand)
        "mid": ("probe", {"camera": status}),
        "out": ("probe", {"camera": status}),  # through "mid": every source upstream
        "alone": ("probe", {}),
    }
