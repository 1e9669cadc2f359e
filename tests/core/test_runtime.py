from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from edgepipe import Message, NodeError, Pipeline, run, run_async
from edgepipe.core.errors import NodeTimeout
from edgepipe.core.lease import Leased
from edgepipe.core.pipeline import ErrorPolicy, OnError
from edgepipe.testing import FakeSource, ListSink


async def test_fan_out_gives_every_consumer_the_same_object() -> None:
    items = [{"n": i} for i in range(20)]
    a: ListSink[dict[str, int]] = ListSink()
    b: ListSink[dict[str, int]] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(items))
    p.sink("a", a, inputs=src)
    p.sink("b", b, inputs=src)
    report = await run_async(p)
    assert report.stopped_by == "end"
    assert len(a.items) == len(b.items) == 20
    assert all(x is y is z for x, y, z in zip(a.items, b.items, items, strict=True))  # no copies


async def test_every_form_of_node_code_runs() -> None:
    def sync_gen() -> Iterator[int]:
        yield from range(5)

    async def async_gen() -> AsyncIterator[int]:
        for i in range(5):
            yield i * 10

    async def add_one(x: int) -> int:
        return x + 1

    async def evens(items: AsyncIterator[int]) -> AsyncIterator[int]:
        async for x in items:
            if x % 2 == 0:
                yield x

    class Doubler:
        def __init__(self) -> None:
            self.started = self.stopped = False

        def start(self) -> None:  # sync hooks run on the executor
            self.started = True

        def stop(self) -> None:
            self.stopped = True

        def process(self, x: int) -> int:
            return x * 2

    doubler = Doubler()
    out: ListSink[int] = ListSink()
    p = Pipeline()
    s1 = p.source("sync_gen", sync_gen)
    s2 = p.source("async_gen", async_gen)
    s3 = p.source("list", [100, 200])
    plus = p.stage("plus", add_one, inputs=[s1, s2, s3])
    double = p.stage("double", doubler, inputs=plus)
    inline = p.stage("inline", lambda x: x - 1, inputs=double, blocking=False)
    even = p.stage("even", evens, inputs=inline)
    p.sink("out", out, inputs=even)
    await run_async(p)
    expected = sorted(
        v for v in ((x + 1) * 2 - 1 for x in [*range(5), *range(0, 50, 10), 100, 200]) if v % 2 == 0
    )
    assert sorted(out.items) == expected  # (x+1)*2-1 is always odd: nothing passes
    assert expected == []
    assert doubler.started
    assert doubler.stopped
    assert out.started
    assert out.stopped


async def test_returning_none_emits_nothing_and_multiple_inputs_merge() -> None:
    out: ListSink[int] = ListSink()
    p = Pipeline()
    a = p.source("a", FakeSource([1, 2, 3]))
    b = p.source("b", FakeSource([4, 5, 6]))
    odd = p.stage("odd", lambda x: x if x % 2 else None, inputs=[a, b], blocking=False)
    p.sink("out", out, inputs=odd)
    report = await run_async(p)
    assert sorted(out.items) == [1, 3, 5]
    stats = report.stats.node("odd")
    assert (stats.items_in, stats.items_out) == (6, 3)


def fragile(x: int) -> int:
    if x == 3:
        raise ValueError("three is bad")
    return x


async def test_skip_policy_drops_the_failing_item_and_goes_on() -> None:
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(6)))
    p.sink("out", out, inputs=p.stage("fragile", fragile, inputs=src, on_error="skip"))
    report = await run_async(p)
    assert out.items == [0, 1, 2, 4, 5]
    assert report.stats.node("fragile").errors == 1


async def test_stop_policy_stops_the_pipeline_naming_the_node() -> None:
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(100), repeat=True))
    p.sink("out", out, inputs=p.stage("fragile", fragile, inputs=src, on_error="stop"))
    with pytest.raises(NodeError, match="node 'fragile': ValueError: three is bad") as info:
        await run_async(p)
    assert info.value.node_id == "fragile"
    assert out.stopped  # every other node was stopped properly


async def test_skip_escalates_when_every_item_fails() -> None:
    p = Pipeline()
    src = p.source("src", FakeSource(range(100), repeat=True))
    broken = p.stage(
        "broken", lambda x: 1 / 0, inputs=src, on_error=ErrorPolicy(OnError.SKIP, max_consecutive=5)
    )
    p.sink("out", ListSink(), inputs=broken)
    with pytest.raises(NodeError, match="5 failures in a row; giving up"):
        await run_async(p)


async def test_restart_policy_restarts_a_source_with_backoff() -> None:
    source = FakeSource(range(5), fail_at=2)
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", source, on_error=ErrorPolicy(OnError.RESTART, backoff_initial_s=0.01))
    p.sink("out", out, inputs=src)
    report = await run_async(p)
    assert out.items == [0, 1, 0, 1, 2, 3, 4]  # failed at 2, reopened from the top
    assert source.opened == 2
    assert report.stats.node("src").restarts == 1


async def test_restart_policy_cycles_a_stage_hooks() -> None:
    class Flaky:
        def __init__(self) -> None:
            self.starts = 0
            self.stops = 0

        async def start(self) -> None:
            self.starts += 1

        async def stop(self) -> None:
            self.stops += 1

        async def process(self, x: int) -> int:
            if x == 2 and self.starts == 1:
                raise RuntimeError("device lost")
            return x

    flaky = Flaky()
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(5)))
    stage = p.stage("flaky", flaky, inputs=src, on_error=ErrorPolicy(OnError.RESTART, backoff_initial_s=0.01))
    p.sink("out", out, inputs=stage)
    await run_async(p)
    assert out.items == [0, 1, 3, 4]
    assert (flaky.starts, flaky.stops) == (2, 2)


async def test_start_failure_stops_the_run_before_any_item_flows() -> None:
    class NoModel:
        def start(self) -> None:
            raise FileNotFoundError("model.onnx")

        def process(self, x: int) -> int:
            return x

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(5)))
    p.sink("out", out, inputs=p.stage("detect", NoModel(), inputs=src))
    with pytest.raises(NodeError, match=r"node 'detect': start\(\) failed: FileNotFoundError: model.onnx"):
        await run_async(p)
    assert out.items == []


async def test_timeout_abandons_a_hung_call_and_keeps_flowing() -> None:
    release = threading.Event()

    def sometimes_hangs(x: int) -> int:
        if x == 1:
            release.wait(5)  # a driver call that never answers in time
        return x

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(4)))
    p.sink("out", out, inputs=p.stage("hw", sometimes_hangs, inputs=src, timeout_s=0.1))
    t0 = time.monotonic()
    report = await run_async(p)
    release.set()
    assert out.items == [0, 2, 3]
    assert report.stats.node("hw").errors == 1
    assert time.monotonic() - t0 < 2


async def test_timeout_is_an_error_that_names_the_node_under_stop() -> None:
    async def slow(x: int) -> int:
        await asyncio.sleep(1)
        return x

    p = Pipeline()
    src = p.source("src", FakeSource([1]))
    p.sink("out", ListSink(), inputs=p.stage("slow", slow, inputs=src, timeout_s=0.05, on_error="stop"))
    with pytest.raises(NodeTimeout, match=r"node 'slow': call took longer than timeout_s=0\.05"):
        await run_async(p)


async def test_stop_drains_queued_items_to_the_sinks() -> None:
    out: ListSink[int] = ListSink(delay_s=0.002)
    p = Pipeline()
    src = p.source("src", FakeSource(range(10_000), interval_s=0.0005))
    stage = p.stage("pass", lambda x: x, inputs=src, blocking=False, queue_size=50)
    p.sink("out", out, inputs=stage, queue_size=50)
    report = await run_async(p, duration_s=0.3)
    assert report.stopped_by == "stop"
    emitted = report.stats.node("src").items_out
    assert out.items == list(range(emitted))  # all that left the source arrived, in order
    assert 10 < emitted < 10_000
    assert report.stats.node("src").state == "stopped"


async def test_drain_deadline_cancels_a_stuck_sink() -> None:
    async def stuck(x: int) -> None:
        await asyncio.sleep(3600)

    p = Pipeline()
    src = p.source("src", FakeSource(range(100), interval_s=0.01))
    p.sink("stuck", stuck, inputs=src)
    t0 = time.monotonic()
    report = await run_async(p, duration_s=0.1, drain_timeout_s=0.2)
    assert report.stopped_by == "forced"
    assert time.monotonic() - t0 < 2


async def test_a_slow_consumer_on_latest_drops_exactly_what_it_misses() -> None:
    out: ListSink[int] = ListSink(delay_s=0.01)
    p = Pipeline()
    src = p.source("camera", FakeSource(range(200), interval_s=0.001))  # 10x faster than the sink
    p.sink("slow", out, inputs=src, policy="latest", queue_size=2)
    report = await run_async(p)
    inbox = report.stats.channel("slow")
    assert len(out.items) + inbox.dropped == 200
    assert inbox.dropped > 100
    assert inbox.max_depth <= 2
    assert out.items[-1] == 199


async def test_blocking_code_never_runs_on_the_event_loop(caplog: pytest.LogCaptureFixture) -> None:
    def heavy(x: int) -> int:
        time.sleep(0.03)  # a blocking decode or inference call
        return x

    def build(blocking: bool | None) -> Pipeline:
        p = Pipeline()
        src = p.source("src", FakeSource(range(5)))
        p.sink("out", ListSink(), inputs=p.stage("heavy", heavy, inputs=src, blocking=blocking))
        return p

    loop = asyncio.get_running_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.02
    try:
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            await run_async(build(None))
            assert not [r for r in caplog.records if "took" in r.getMessage()]
            await run_async(build(False))  # the control: on the loop, it is caught
            assert [r for r in caplog.records if "took" in r.getMessage()]
    finally:
        loop.set_debug(False)


async def test_results_file_has_one_line_per_message_reaching_a_sink(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"

    def fragile(x: int) -> Message:
        if x == 2:
            raise ValueError("bad frame")
        return Message("detection", {"frame": x})

    p = Pipeline()
    src = p.source("src", FakeSource(range(4)))
    det = p.stage("det", fragile, inputs=src)
    p.sink("a", ListSink(), inputs=det)
    p.sink("b", ListSink(), inputs=det)  # two sinks, still one line per message
    await run_async(p, results_path=str(path))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    detections = [r for r in lines if r["kind"] == "detection"]
    assert [r["data"]["frame"] for r in detections] == [0, 1, 3]
    assert all(r["node"] == "det" and isinstance(r["t"], float) for r in detections)
    errors = [r for r in lines if r["kind"] == "error"]
    assert errors == [
        {
            "t": errors[0]["t"],
            "node": "det",
            "kind": "error",
            "data": {"error": "ValueError", "message": "bad frame"},
        }
    ]


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_runs_on_both_loops(loop: str) -> None:
    seen_loop: list[str] = []

    async def note_loop(x: int) -> int:
        seen_loop.append(type(asyncio.get_running_loop()).__module__)
        return x

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(3)))
    p.sink("out", out, inputs=p.stage("s", note_loop, inputs=src))
    run(p, loop=loop)
    assert out.items == [0, 1, 2]
    assert seen_loop[0].startswith(loop)


async def test_a_consumer_that_ends_early_stops_an_endless_source() -> None:
    async def first_three(items: AsyncIterator[int]) -> AsyncIterator[int]:
        n = 0
        async for x in items:
            yield x
            n += 1
            if n == 3:
                return

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("endless", FakeSource(range(10), repeat=True))
    p.sink("out", out, inputs=p.stage("head", first_three, inputs=src))
    report = await run_async(p)
    assert out.items == [0, 1, 2]
    assert report.stopped_by == "end"
    assert report.stats.node("endless").state == "done"


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
    report = await run_async(p)
    assert report.stats.channel("slow").dropped > 0
    assert 7 not in Slot.freed
    kept[0].release()
    assert sorted(Slot.freed) == list(range(300))  # each freed once, none leaked


async def test_a_stop_hook_slower_than_the_drain_deadline_still_finishes_and_the_run_ends() -> None:
    class SlowToClose:
        closed = False

        def __aiter__(self) -> AsyncIterator[int]:
            return FakeSource(range(1000), interval_s=0.01).__aiter__()

        async def stop(self) -> None:
            await asyncio.sleep(0.6)  # longer than the drain deadline below
            SlowToClose.closed = True

    p = Pipeline()
    p.sink("out", ListSink(), inputs=p.source("src", SlowToClose()))
    t0 = time.monotonic()
    report = await asyncio.wait_for(run_async(p, duration_s=0.1, drain_timeout_s=0.2), 10)
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
    report = await asyncio.wait_for(run_async(p, duration_s=0.3, drain_timeout_s=2), 10)
    assert report.stopped_by == "stop"


async def test_an_abandoned_call_does_not_make_the_next_ones_time_out() -> None:
    def sometimes_slow(x: int) -> int:
        time.sleep(1.0 if x == 0 else 0.01)
        return x

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(8)))
    p.sink("out", out, inputs=p.stage("npu", sometimes_slow, inputs=src, resource="npu", timeout_s=0.2))
    report = await run_async(p)
    assert out.items == list(range(1, 8))
    assert report.stats.node("npu").errors == 1


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
    await run_async(p)
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
    await run_async(p)
    assert states == [False] * 5
    assert sorted(Slot.freed) == list(range(5))


async def test_an_unencodable_result_is_recorded_not_fatal(tmp_path: Path) -> None:
    class Weird:
        def to_dict(self) -> dict[str, int]:
            raise KeyError("nope")

    path = tmp_path / "r.jsonl"
    p = Pipeline()
    p.sink("out", ListSink(), inputs=p.stage("weird", lambda x: Weird(), inputs=p.source("src", [1, 2])))
    await run_async(p, results_path=str(path))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2
    assert "KeyError" in records[0]["data"]["error"]


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
    report = await asyncio.wait_for(run_async(p, duration_s=0.5), 10)
    assert report.stopped_by == "stop"
    assert 3 <= Flaky.opened <= 15  # reopened every 50 ms, not 300 000 times a second


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
    report = await asyncio.wait_for(run_async(p, duration_s=0.6), 10)
    assert Stalls.opened >= 3
    assert report.stats.node("src").errors >= 2
