"""Steady output: results held to their frame's time plus one presentation delay (fake clock)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from edgepipe.core.lease import Leased
from edgepipe.runtime.inflight.present import EASE, MARGIN_NS, MAX_WAITING, WINDOW, Presenter

MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.ns = 10_000 * MS

    def __call__(self) -> int:
        return self.ns


@dataclass
class Result:
    t_decoded_ns: int
    name: str
    latency_ms: float | None = 0.0


def presenter(clock: Clock) -> tuple[Presenter, list[str]]:
    out: list[str] = []

    async def emit(item: Result) -> None:
        out.append(item.name)

    return Presenter(emit, clock), out


def test_the_delay_is_the_95th_percentile_of_the_calls_ages_up_at_once_and_down_slowly() -> None:
    clock = Clock()
    p, _ = presenter(clock)
    for age in range(100, 100 + WINDOW):  # calls whose results were 100, 101 ... ms old when ready
        p.called(Result(clock.ns - age * MS, "x"))
    p95 = 100 + int(0.95 * (WINDOW - 1))
    assert p.delay_ns == pytest.approx(p95 * MS + MARGIN_NS, abs=MS)
    p.called(Result(clock.ns - 400 * MS, "slow"))  # slower calls: the delay follows at once
    for _ in range(3):
        p.called(Result(clock.ns - 400 * MS, "slow"))
    assert p.delay_ns == 400 * MS + MARGIN_NS
    high = p.delay_ns
    for _ in range(WINDOW):  # quick again: it eases down, never in one jump
        before = p.delay_ns
        p.called(Result(clock.ns - 50 * MS, "quick"))
        assert before - p.delay_ns <= EASE * (before - 50 * MS) + MS
    assert 55 * MS < p.delay_ns < high


def test_results_wait_for_their_time_in_their_lanes_order_and_say_their_age() -> None:
    async def scenario() -> list[str]:
        clock = Clock()
        p, out = presenter(clock)
        p.delay_ns = 100 * MS
        runner = asyncio.create_task(p.run())
        first = Result(clock.ns - 10 * MS, "a0")  # due in 90 ms
        await p.put("a", first)
        await p.put("b", Result(clock.ns - 200 * MS, "b0"))  # past its time, nothing before it
        await p.put("a", Result(clock.ns - 300 * MS, "a1"))  # past its time, but behind a0
        await asyncio.sleep(0)
        assert out == ["b0"]
        clock.ns += 90 * MS
        p.end()
        await runner
        assert first.latency_ms == pytest.approx(100.0)
        return out

    assert asyncio.run(scenario()) == ["b0", "a0", "a1"]


def test_off_or_without_a_decode_time_results_leave_as_they_are_ready() -> None:
    async def scenario() -> list[str]:
        clock = Clock()
        p, out = presenter(clock)
        p.delay_ns = 100 * MS
        await p.put("a", Result(0, "no time"))
        p.on = False
        await p.put("a", Result(clock.ns, "not steady"))
        return out

    assert asyncio.run(scenario()) == ["no time", "not steady"]


def test_a_lane_holds_a_bounded_number_and_what_is_left_at_a_cancel_goes_back() -> None:
    freed: list[int] = []

    class Pooled(Leased):
        def __init__(self, n: int, born: int) -> None:
            super().__init__()
            self.n, self.t_decoded_ns = n, born

        def _free(self) -> None:
            freed.append(self.n)

    async def scenario() -> list[str]:
        clock = Clock()
        out: list[str] = []

        async def emit(item: Pooled) -> None:
            out.append(str(item.n))

        p = Presenter(emit, clock)
        p.delay_ns = 500 * MS
        for n in range(MAX_WAITING + 3):
            await p.put("a", Pooled(n, clock.ns))
        p.close()
        return out

    assert asyncio.run(scenario()) == ["0", "1", "2"], "past the bound the oldest leave at once"
    assert sorted(freed) == list(range(3, MAX_WAITING + 3))
