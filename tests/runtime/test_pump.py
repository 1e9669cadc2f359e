"""The node loops with several input lanes: what each lane's policy promises holds in a run."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator

import pytest

from edgepipe import Pipeline
from edgepipe.core.context import current_node
from edgepipe.core.lease import Leased
from edgepipe.graph.pipeline import Input
from edgepipe.runner import RunConfig, run_async
from edgepipe.testing import FakeSource, ListSink


async def frames_flood(n: int) -> AsyncIterator[int]:
    for i in range(n):  # ~20 frames a millisecond: far faster than anything downstream
        yield i
        if i % 20 == 0:
            await asyncio.sleep(0.001)


@pytest.mark.slow
async def test_a_frame_flood_never_makes_a_lossless_results_lane_drop() -> None:
    frames = 20_000

    def detect(frame: int) -> dict[str, int] | None:
        time.sleep(0.001)  # a detector that finds something on every other frame it sees
        return {"frame": frame} if frame % 2 == 0 else None

    class Annotate:
        def __init__(self) -> None:
            self.results: list[int] = []
            self.frames = 0

        async def process(self, item: int | dict[str, int], lane: str) -> None:
            if lane == "results":
                assert isinstance(item, dict)
                self.results.append(item["frame"])
            else:
                assert isinstance(item, int)
                self.frames += 1
            await asyncio.sleep(0.002)  # slower than the frames come

    annotate = Annotate()
    p = Pipeline()
    camera = p.source("camera", lambda: frames_flood(frames))
    found = p.stage("detect", detect, inputs=camera, policy="latest", queue_size=1)
    p.sink(
        "annotate", annotate, inputs={"frames": Input(camera, "latest", 1), "results": found}, queue_size=2
    )
    report = await run_async(p, RunConfig(governed=False))
    detected = report.stats.node("detect").items_out
    assert detected > 20
    assert annotate.results == sorted(annotate.results)
    assert len(annotate.results) == detected  # every result arrived: none dropped by the flood
    assert report.stats.channel("annotate", "frames").dropped > frames // 2
    assert annotate.frames + report.stats.channel("annotate", "frames").dropped == frames


async def test_handlers_that_take_a_lane_get_its_name_in_every_mode() -> None:
    seen: dict[str, set[tuple[str, str]]] = {"thread": set(), "async": set(), "inline": set()}

    def on_thread(item: str, lane: str) -> None:
        seen["thread"].add((item, lane))

    async def on_loop(item: str, lane: str) -> None:
        seen["async"].add((item, lane))

    def inline(item: str, lane: str) -> None:
        seen["inline"].add((item, lane))

    p = Pipeline()
    left = p.source("left", FakeSource(["l1", "l2"]))
    right = p.source("right", FakeSource(["r1"]))
    p.sink("thread", on_thread, inputs={"L": left, "R": right})
    p.sink("async", on_loop, inputs={"L": left, "R": right})
    p.sink("inline", inline, inputs={"L": left, "R": right}, on_loop=True)
    await run_async(p, RunConfig(governed=False))
    for mode in seen:
        assert seen[mode] == {("l1", "L"), ("l2", "L"), ("r1", "R")}, mode


async def test_a_stream_stage_reads_the_lane_from_its_context() -> None:
    async def tag(items: AsyncIterator[str]) -> AsyncIterator[str]:
        async for item in items:
            yield f"{current_node().lane}:{item}"

    out: ListSink[str] = ListSink()
    p = Pipeline()
    a = p.source("a", FakeSource(["x"]))
    b = p.source("b", FakeSource(["y"]))
    p.sink("out", out, inputs=p.stage("tag", tag, inputs={"first": a, "second": b}))
    await run_async(p, RunConfig(governed=False))
    assert sorted(out.items) == ["first:x", "second:y"]


async def test_a_handler_without_a_lane_parameter_gets_the_item_alone() -> None:
    got: list[int] = []

    def take(item: int, scale: int = 10) -> None:
        got.append(item * scale)

    p = Pipeline()
    p.sink("take", take, inputs=[p.source("a", FakeSource([1])), p.source("b", FakeSource([2]))])
    await run_async(p, RunConfig(governed=False))
    assert sorted(got) == [10, 20]


@pytest.mark.slow
async def test_busy_time_counts_every_call_while_latency_is_sampled() -> None:
    calls = 3000

    def work(item: int) -> int:
        time.sleep(0.0001)  # at least 0.1 ms each: 0.3 s in all
        return item

    out: ListSink[int] = ListSink()
    p = Pipeline()
    p.sink(
        "out",
        out,
        inputs=p.stage("work", work, inputs=p.source("src", FakeSource(range(calls))), on_loop=True),
    )
    report = await run_async(p, RunConfig(governed=False))
    stats = report.stats.node("work")
    assert len(out.items) == calls
    assert stats.busy_s >= calls * 0.0001
    assert stats.latency_p50_ms is not None
    assert stats.latency_p50_ms >= 0.1


class Pooled(Leased):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n


class TwoStep:
    def prepare(self, item: Pooled) -> Pooled:
        return item

    def process(self, item: Pooled) -> Pooled:
        time.sleep(0.4)
        return item


class Batches:
    batch_size = 4

    def process(self, item: Pooled) -> Pooled:
        return item

    def process_batch(self, items: list[Pooled]) -> list[Pooled]:
        time.sleep(0.4)
        return items


def in_thread(item: Pooled) -> Pooled:
    time.sleep(0.4)
    return item


async def on_loop(item: Pooled) -> Pooled:
    await asyncio.sleep(5)
    return item


async def stream(items: AsyncIterator[Pooled]) -> AsyncIterator[Pooled]:
    async for item in items:
        await asyncio.sleep(5)
        yield item


SLOW = {"thread": in_thread, "async": on_loop, "stream": stream, "two-step": TwoStep, "batch": Batches,
        "restart": in_thread}  # fmt: skip


@pytest.mark.parametrize("how", ["forced stop", "cancelled"])
@pytest.mark.parametrize("mode", list(SLOW))
@pytest.mark.slow
async def test_a_stop_or_cancel_mid_call_gives_every_lease_back(mode: str, how: str) -> None:
    made: list[Pooled] = []

    async def source() -> AsyncIterator[Pooled]:
        for n in range(6):
            made.append(Pooled(n))
            yield made[-1]

    slow = SLOW[mode]
    p = Pipeline()
    work = p.stage("work", slow() if isinstance(slow, type) else slow, inputs=p.source("src", source),
                   queue_size=2, on_error="restart" if mode == "restart" else "skip")  # fmt: skip
    p.sink("sink", in_thread, inputs=work, queue_size=1)
    if how == "forced stop":
        await run_async(p, RunConfig(governed=False, duration_s=0.2, drain_timeout_s=0.1))
    else:
        run = asyncio.ensure_future(run_async(p, RunConfig(governed=False)))
        await asyncio.sleep(0.2)  # mid-call: the first item is in `work`, more are queued
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
    assert len(made) >= 3
    deadline = time.monotonic() + 3  # abandoned threads finish their 0.4 s calls, then give theirs back
    while any(s.refs > 0 for s in made):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    assert [s.n for s in made if s.refs > 0] == []


@pytest.mark.slow
async def test_latency_sampling_and_busy_time_go_on_after_a_failure() -> None:
    def flaky(x: int) -> int:
        if x < 3:
            time.sleep(0.001)
        elif x == 3:
            time.sleep(0.3)
            raise ValueError("one bad item, slowly")
        else:
            time.sleep(0.01)
        return x

    p = Pipeline()
    p.sink("out", ListSink(), inputs=p.stage("flaky", flaky, inputs=p.source("src", FakeSource(range(40)))))
    report = await run_async(p, RunConfig(governed=False))
    stats = report.stats.node("flaky")
    assert stats.errors == 1
    assert stats.busy_s >= 0.3 + 36 * 0.01  # the failed call counted too
    assert stats.latency_p50_ms is not None
    assert stats.latency_p50_ms >= 9  # the calls after the failure were timed


async def test_a_restarted_stream_keeps_the_item_it_works_on() -> None:
    made: list[Pooled] = []
    freed_under_us: list[int] = []

    async def source() -> AsyncIterator[Pooled]:
        for n in range(6):
            made.append(Pooled(n))
            yield made[-1]

    async def stream(items: AsyncIterator[Pooled]) -> AsyncIterator[int]:
        async for item in items:
            if item.n == 1:
                raise RuntimeError("one failure")
            await asyncio.sleep(0.01)
            if item.refs == 0:
                freed_under_us.append(item.n)  # the pool may have reused it by now
            yield item.n * 10

    out: ListSink[int] = ListSink()
    p = Pipeline()
    p.sink("out", out, inputs=p.stage("s", stream, inputs=p.source("src", source), queue_size=8))
    await run_async(p, RunConfig(governed=False))
    assert freed_under_us == []
    assert out.items == [0, 20, 30, 40, 50]
    assert [s.refs for s in made] == [0] * 6


async def test_a_two_step_stage_on_one_input_gets_its_lane_too() -> None:
    class TwoStep:
        def __init__(self) -> None:
            self.seen: list[tuple[str, int]] = []

        def prepare(self, item: int) -> int:
            return item

        def process(self, item: int, lane: str) -> int:
            self.seen.append((lane, item))
            return item

    stage = TwoStep()
    p = Pipeline()
    p.sink(
        "out", ListSink(), inputs=p.stage("two", stage, inputs={"cam": p.source("a", FakeSource(range(3)))})
    )
    report = await run_async(p, RunConfig(governed=False))
    assert report.stats.node("two").errors == 0
    assert stage.seen == [("cam", 0), ("cam", 1), ("cam", 2)]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_sys_exit_in_a_stage_fails_that_item_not_the_process(kind: str) -> None:
    def quit_on_two(x: int) -> int:
        if x == 2:
            sys.exit(4)
        return x

    async def quit_on_two_async(x: int) -> int:
        return quit_on_two(x)

    sink: ListSink[int] = ListSink()
    p = Pipeline("exits")
    src = p.source("numbers", FakeSource([1, 2, 3]))
    stage = p.stage("quit", quit_on_two if kind == "sync" else quit_on_two_async, inputs=src)
    p.sink("out", sink, inputs=stage)
    report = await run_async(p, RunConfig(governed=False))
    assert sink.items == [1, 3]
    assert next(n for n in report.stats.nodes if n.node_id == "quit").errors == 1
