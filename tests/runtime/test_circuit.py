"""The circuit breaker: a node that keeps failing is skipped, not a reason to stop the run."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from edgepipe import NodeError, Pipeline
from edgepipe.core.lease import Leased
from edgepipe.graph.spec import ErrorPolicy, OnError
from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime.engine import Runtime
from edgepipe.testing import FakeSource, ListSink


class Flaky:
    """Fails on every item for ``fail_s`` after its first call, then works. Counts its calls."""

    def __init__(self, fail_s: float) -> None:
        self.fail_s = fail_s
        self.t0: float | None = None
        self.calls = 0
        self.starts = 0

    def start(self) -> None:
        self.starts += 1

    def process(self, item: int) -> int:
        self.calls += 1
        if self.t0 is None:
            self.t0 = time.monotonic()
        if time.monotonic() - self.t0 < self.fail_s:
            raise RuntimeError(f"broken on {item}")
        return item


def states(results: Path, node: str) -> list[str]:
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    return [r["data"]["circuit"] for r in lines if r["kind"] == "node_state" and r["node"] == node]


@pytest.mark.slow
async def test_a_node_failing_for_2_s_opens_its_circuit_and_recovers(tmp_path: Path) -> None:
    flaky = Flaky(fail_s=2.0)
    items = 300  # one every 10 ms: 3 s
    seen_open: list[str] = []

    async def watch(runtime: Runtime) -> None:
        while True:
            seen_open.append(runtime.snapshot().node("flaky").state)
            await asyncio.sleep(0.05)

    fast: ListSink[int] = ListSink()
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(items), interval_s=0.01))
    policy = ErrorPolicy(OnError.SKIP, open_after=3, cooldown_s=0.2, cooldown_max_s=0.4)
    p.sink("out", out, inputs=p.stage("flaky", flaky, inputs=src, on_error=policy))
    p.sink("fast", fast, inputs=src)  # the rest of the graph
    results = tmp_path / "results.jsonl"
    t0 = time.monotonic()
    report = await run_async(p, RunConfig(governed=False, results_path=str(results), watchers=[watch]))
    elapsed = time.monotonic() - t0

    assert report.stopped_by == "end"  # no pipeline stop
    assert fast.items == list(range(items))  # the other branch kept every item...
    assert elapsed < 3 * 1.5  # ...at the source's rate
    stats = report.stats.node("flaky")
    # While open the code was not called: far fewer calls (and errors) than items in 2 s.
    assert stats.skipped > 100
    assert flaky.calls == items - stats.skipped
    assert stats.errors < 40
    assert stats.items_in == items
    # Recovered: everything after the failing spell came through.
    assert out.items[-1] == items - 1
    assert len(out.items) > 50
    assert stats.state == "done"
    assert "open" in seen_open  # --stats shows it
    transitions = states(results, "flaky")
    assert transitions[0] == "open"
    assert transitions[-1] == "closed"
    assert "half-open" in transitions
    # Cool-downs doubled up to their cap, each trial of a still-broken node opening it again.
    assert transitions.count("open") == transitions.count("half-open")


async def test_a_sink_has_a_circuit_too_and_pooled_items_it_skips_go_back() -> None:
    freed: list[int] = []

    class Pooled(Leased):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.n = n

        def _free(self) -> None:
            freed.append(self.n)

    def broken(item: Any) -> None:
        raise ValueError("disk gone")

    p = Pipeline()
    src = p.source("src", FakeSource([Pooled(i) for i in range(50)], interval_s=0.002))
    p.sink("sink", broken, inputs=src, on_error=ErrorPolicy(open_after=2, cooldown_s=10))
    report = await run_async(p, RunConfig(governed=False))
    stats = report.stats.node("sink")
    assert stats.errors == 2
    assert stats.skipped == 48
    assert stats.state == "done"
    assert sorted(freed) == list(range(50))


@pytest.mark.slow
async def test_restart_policy_cycles_the_hooks_before_the_trial_item() -> None:
    flaky = Flaky(fail_s=0.3)
    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(100), interval_s=0.01))
    policy = ErrorPolicy(OnError.RESTART, open_after=2, cooldown_s=0.1, backoff_initial_s=0.01)
    p.sink("out", out, inputs=p.stage("flaky", flaky, inputs=src, on_error=policy))
    report = await run_async(p, RunConfig(governed=False))
    assert flaky.starts >= 3  # the first start, a restart after the first failure, one per trial
    assert report.stats.node("flaky").restarts >= 1
    assert out.items[-1] == 99


async def test_stop_still_stops_the_pipeline_at_the_first_failure() -> None:
    p = Pipeline()
    src = p.source("src", FakeSource(range(100), interval_s=0.001))
    p.sink("out", ListSink(), inputs=p.stage("flaky", Flaky(fail_s=10), inputs=src, on_error="stop"))
    with pytest.raises(NodeError, match="node 'flaky': RuntimeError: broken on 0"):
        await run_async(p, RunConfig(governed=False))


def test_bad_circuit_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="open_after must be at least 1"):
        ErrorPolicy(open_after=0)
    with pytest.raises(ValueError, match="cooldown_s must be a finite number"):
        ErrorPolicy(cooldown_s=float("nan"))


@pytest.mark.slow
async def test_a_two_step_node_opens_once_and_tries_one_item_at_a_time(tmp_path: Path) -> None:
    # Runs already queued when the circuit opened fail too: that is not a new opening, and
    # the cool-down is not pushed back; half-open lets one trial through, not two.
    class TwoStepFlaky(Flaky):
        def prepare(self, item: int) -> int:
            return item

        def process(self, item: int) -> int:
            time.sleep(0.005)
            return super().process(item)

    flaky = TwoStepFlaky(fail_s=1.0)
    p = Pipeline()
    src = p.source("src", FakeSource(range(600), interval_s=0.002))
    policy = ErrorPolicy(OnError.SKIP, open_after=3, cooldown_s=0.2, cooldown_max_s=0.4)
    p.sink("out", ListSink(), inputs=p.stage("flaky", flaky, inputs=src, on_error=policy))
    results = tmp_path / "results.jsonl"
    report = await run_async(p, RunConfig(governed=False, results_path=str(results)))
    transitions = states(results, "flaky")
    assert transitions.count("open") == transitions.count("half-open")
    assert transitions[-1] == "closed"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    closed = [r["data"] for r in lines if r["kind"] == "node_state" and r["data"]["circuit"] == "closed"]
    assert closed[-1]["skipped"] == report.stats.node("flaky").skipped


async def test_failed_starts_before_the_first_item_do_not_count_against_the_circuit() -> None:
    class Node:
        def __init__(self) -> None:
            self.starts = 0

        def start(self) -> None:
            self.starts += 1
            if self.starts <= 2:
                raise RuntimeError("model not there yet")

        def process(self, item: int) -> int:
            if item == 0:
                raise ValueError("one bad frame")
            return item

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(40), interval_s=0.005))
    policy = ErrorPolicy(OnError.RESTART, open_after=3, cooldown_s=0.2, backoff_initial_s=0.01)
    p.sink("out", out, inputs=p.stage("n", Node(), inputs=src, on_error=policy))
    report = await run_async(p, RunConfig(governed=False))
    assert report.stats.node("n").skipped == 0
    assert out.items == list(range(1, 40))


@pytest.mark.slow
async def test_a_stream_stage_that_yields_rarely_still_closes_its_circuit() -> None:
    # A stream yields one output per 10 inputs: taking its trial item and asking for the next
    # without failing is its success, or it would stay half-open, skipping everything.
    t0 = time.monotonic()

    async def every_tenth(items: AsyncIterator[int]) -> AsyncIterator[int]:
        async for item in items:
            if time.monotonic() - t0 < 0.3:
                raise RuntimeError("warming up")
            if item % 10 == 0:
                yield item

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(400), interval_s=0.002))
    policy = ErrorPolicy(OnError.SKIP, open_after=2, cooldown_s=0.1, cooldown_max_s=0.2)
    p.sink("out", out, inputs=p.stage("tens", every_tenth, inputs=src, on_error=policy))
    report = await run_async(p, RunConfig(governed=False))
    stats = report.stats.node("tens")
    assert stats.skipped > 0
    assert out.items[-1] == 390  # closed again: the last items went through
    assert len(out.items) > 15


@pytest.mark.slow
async def test_a_stream_that_fails_before_taking_anything_does_not_spin() -> None:
    attempts = 0

    async def stream(items: AsyncIterator[int]) -> AsyncIterator[int]:
        nonlocal attempts
        attempts += 1
        raise ConnectionError("server down")  # before it asks for its first item
        yield 0  # an async generator

    p = Pipeline()
    src = p.source("src", FakeSource(range(1000), interval_s=0.01))
    policy = ErrorPolicy(OnError.SKIP, open_after=2, cooldown_s=0.2, cooldown_max_s=0.4)
    p.sink("out", ListSink(), inputs=p.stage("s", stream, inputs=src, on_error=policy))
    t0 = time.monotonic()
    report = await run_async(p, RunConfig(governed=False, duration_s=1.0))
    assert time.monotonic() - t0 < 3  # the loop was never starved: the duration fired
    assert attempts < 10  # the cool-downs hold the restarts back, doubling
    assert report.stats.node("s").skipped > 50  # and the input was drained meanwhile


async def test_failed_restarts_do_not_count_as_failed_items() -> None:
    class Node:
        def __init__(self) -> None:
            self.starts = 0

        def start(self) -> None:
            self.starts += 1
            if self.starts in (2, 3):  # the first restart takes the device two tries
                raise RuntimeError("device busy")

        def process(self, item: int) -> int:
            if item in (0, 1):  # two bad frames, not three
                raise ValueError(f"bad frame {item}")
            return item

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(30), interval_s=0.005))
    policy = ErrorPolicy(OnError.RESTART, open_after=3, cooldown_s=0.3, backoff_initial_s=0.01)
    p.sink("out", out, inputs=p.stage("n", Node(), inputs=src, on_error=policy))
    report = await run_async(p, RunConfig(governed=False))
    assert report.stats.node("n").skipped == 0
    assert out.items == list(range(2, 30))
