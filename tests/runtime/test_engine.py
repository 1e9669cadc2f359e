from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from edgepipe import Message, NodeError, Pipeline
from edgepipe.core.errors import NodeTimeout
from edgepipe.graph.pipeline import ErrorPolicy, OnError
from edgepipe.graph.spec import on_loop as declare_on_loop
from edgepipe.runner import RunConfig, run_async
from edgepipe.testing import FakeSource, ListSink


async def test_fan_out_gives_every_consumer_the_same_object() -> None:
    items = [{"n": i} for i in range(20)]
    a: ListSink[dict[str, int]] = ListSink()
    b: ListSink[dict[str, int]] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(items))
    p.sink("a", a, inputs=src)
    p.sink("b", b, inputs=src)
    report = await run_async(p, RunConfig(governed=False))
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
    inline = p.stage("inline", lambda x: x - 1, inputs=double, on_loop=True)
    even = p.stage("even", evens, inputs=inline)
    p.sink("out", out, inputs=even)
    await run_async(p, RunConfig(governed=False))
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
    odd = p.stage("odd", lambda x: x if x % 2 else None, inputs=[a, b], on_loop=True)
    p.sink("out", out, inputs=odd)
    report = await run_async(p, RunConfig(governed=False))
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
    report = await run_async(p, RunConfig(governed=False))
    assert out.items == [0, 1, 2, 4, 5]
    assert report.stats.node("fragile").errors == 1


async def test_the_report_names_a_sink_that_wrote_nothing_it_was_given() -> None:
    def broken(x: int) -> None:
        raise OSError(28, "No space left on device")

    class LostAtClose:  # every call succeeded, but the output was lost as a whole
        failed_output: str | None = None

        def process(self, x: int) -> None: ...

        def stop(self) -> None:
            self.failed_output = "out.mp4: nothing recorded of 6 frame(s): I/O error"

    class ClipLost:  # a stage that writes files of its own (event clips): it can lose output too
        failed_output = "event clip c.mp4 lost: cannot write: no space left on device"

        def process(self, x: int) -> int:
            return x

    p = Pipeline()
    src = p.source("src", FakeSource(range(6)))
    p.sink("disk", broken, inputs=src)
    p.sink("flaky", fragile, inputs=src)  # one failure in six: not a lost output
    p.sink("recorder", LostAtClose(), inputs=src)
    p.sink("log", ListSink(), inputs=p.stage("events", ClipLost(), inputs=src))
    report = await run_async(p, RunConfig(governed=False))
    assert report.failed_sinks == (
        "sink 'disk': every write failed (5 of 5; 1 more skipped while its circuit was open); nothing it was "
        "given was written (errors logged above)",
        "sink 'recorder': out.mp4: nothing recorded of 6 frame(s): I/O error",
        "sink 'events': event clip c.mp4 lost: cannot write: no space left on device",
    )
    assert report.output_failed


async def test_stop_policy_stops_the_pipeline_naming_the_node() -> None:
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(100), repeat=True))
    p.sink("out", out, inputs=p.stage("fragile", fragile, inputs=src, on_error="stop"))
    with pytest.raises(NodeError, match="node 'fragile': ValueError: three is bad") as info:
        await run_async(p, RunConfig(governed=False))
    assert info.value.node_id == "fragile"
    assert out.stopped  # every other node was stopped properly


async def test_a_source_that_keeps_failing_gives_up() -> None:
    source_fails_every_time = ErrorPolicy(OnError.RESTART, max_consecutive=3, backoff_initial_s=0.001)

    async def always_failing() -> AsyncIterator[int]:
        raise RuntimeError("no camera")
        yield 0

    p = Pipeline()
    src = p.source("src", always_failing, on_error=source_fails_every_time)
    p.sink("out", ListSink(), inputs=src)
    with pytest.raises(NodeError, match="3 failures in a row; giving up"):
        await run_async(p, RunConfig(governed=False))


async def test_restart_policy_restarts_a_source_with_backoff() -> None:
    source = FakeSource(range(5), fail_at=2)
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", source, on_error=ErrorPolicy(OnError.RESTART, backoff_initial_s=0.01))
    p.sink("out", out, inputs=src)
    report = await run_async(p, RunConfig(governed=False))
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
    await run_async(p, RunConfig(governed=False))
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
        await run_async(p, RunConfig(governed=False))
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
    report = await run_async(p, RunConfig(governed=False))
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
        await run_async(p, RunConfig(governed=False))


@pytest.mark.slow
async def test_stop_drains_queued_items_to_the_sinks() -> None:
    out: ListSink[int] = ListSink(delay_s=0.002)
    p = Pipeline()
    src = p.source("src", FakeSource(range(10_000), interval_s=0.0005))
    stage = p.stage("pass", lambda x: x, inputs=src, on_loop=True, queue_size=50)
    p.sink("out", out, inputs=stage, queue_size=50)
    report = await run_async(p, RunConfig(governed=False, duration_s=0.3))
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
    report = await run_async(p, RunConfig(governed=False, duration_s=0.1, drain_timeout_s=0.2))
    assert report.stopped_by == "forced"
    assert time.monotonic() - t0 < 2


async def test_a_slow_consumer_on_latest_drops_exactly_what_it_misses() -> None:
    out: ListSink[int] = ListSink(delay_s=0.01)
    p = Pipeline()
    src = p.source("camera", FakeSource(range(200), interval_s=0.001))  # 10x faster than the sink
    p.sink("slow", out, inputs=src, policy="latest", queue_size=2)
    report = await run_async(p, RunConfig(governed=False))
    inbox = report.stats.channel("slow")
    assert len(out.items) + inbox.dropped == 200
    assert inbox.dropped > 100
    assert inbox.max_depth <= 2
    assert out.items[-1] == 199


@pytest.mark.slow
async def test_blocking_code_never_runs_on_the_event_loop(caplog: pytest.LogCaptureFixture) -> None:
    def heavy(x: int) -> int:
        time.sleep(0.03)  # a blocking decode or inference call
        return x

    def build(code: Any, on_loop: bool | None) -> Pipeline:
        p = Pipeline()
        src = p.source("src", FakeSource(range(5)))
        p.sink("out", ListSink(), inputs=p.stage("heavy", code, inputs=src, on_loop=on_loop))
        return p

    async def slow_on_the_loop(code: Any, on_loop: bool | None) -> bool:
        caplog.clear()
        await run_async(build(code, on_loop), RunConfig(governed=False))
        return any("took" in r.getMessage() for r in caplog.records)

    declared = declare_on_loop(functools.partial(heavy))  # the code says where it runs
    loop = asyncio.get_running_loop()
    loop.set_debug(True)
    # Five calls of 30 ms on the loop take 150 ms in one step; a step of the run's own set-up
    # (a few ms) can take 20-30 ms of wall time on a busy machine: the threshold sits between.
    loop.slow_callback_duration = 0.1
    try:
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            assert not await slow_on_the_loop(heavy, None)
            assert await slow_on_the_loop(heavy, True)  # the control: on the loop, it is caught
            assert await slow_on_the_loop(declared, None)  # old code: on a thread
            assert not await slow_on_the_loop(declared, False)  # the declaration's word wins
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
    await run_async(p, RunConfig(governed=False, results_path=str(path)))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    detections = [r for r in lines if r["kind"] == "detection"]
    assert [r["data"]["frame"] for r in detections] == [0, 1, 3]
    assert all(r["node"] == "det" and isinstance(r["t"], float) for r in detections)
    errors = [r for r in lines if r["kind"] == "error"]
    assert errors == [
        {
            "v": 1,
            "t": errors[0]["t"],
            "node": "det",
            "kind": "error",
            "data": {"error": "ValueError", "message": "bad frame"},
        }
    ]


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
    report = await run_async(p, RunConfig(governed=False))
    assert out.items == [0, 1, 2]
    assert report.stopped_by == "end"
    assert report.stats.node("endless").state == "done"
