"""Admission of heavy calls: slots, shares by priority, pacing, deadlines, overlap, cancelling."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from edgepipe.sched.gate import AdmissionCancelled, AdmissionTimeout, Gate, Ticket


class StillClock:
    """A gate's clock that moves only when the test moves it: a pace or a deadline then never
    ends by itself, and the times a test reads are exact."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for another thread to get somewhere (a bound on a hang, not a measurement)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the other thread never got there"
        time.sleep(0.001)


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def hammer(gate: Gate, ticket: Ticket, stop: threading.Event, run_s: float) -> None:
    while not stop.is_set():
        with gate.admit(ticket, timeout_s=5):
            time.sleep(run_s)  # a model run: holds the unit, needs no Python CPU here


def contend(gate: Gate, tickets: list[Ticket], seconds: float, run_s: float) -> None:
    """Each ticket's caller runs back to back on a thread of its own for ``seconds``."""
    stop = threading.Event()
    threads = [threading.Thread(target=hammer, args=(gate, t, stop, run_s)) for t in tickets]
    for th in threads:
        th.start()
    time.sleep(seconds)
    stop.set()
    for th in threads:
        th.join()


@pytest.mark.slow
def test_one_unit_runs_one_heavy_call_at_a_time_and_overlap_is_measured() -> None:
    gate = Gate(1)
    detect, lm = Ticket("faces", "detect", 1), Ticket("describe", "lm", 0)
    contend(gate, [detect, lm], 0.6, 0.005)
    assert gate.stats().detect_lm_overlap_s == 0.0
    assert detect.calls > 0
    assert lm.calls > 0
    free = Gate(None)  # ungoverned: both at once, and the overlap shows it
    contend(free, [detect, lm], 0.6, 0.005)
    assert free.stats().detect_lm_overlap_s > 0.1


@pytest.mark.slow
def test_priorities_share_the_budget_and_the_low_one_never_starves() -> None:
    gate = Gate(1)
    detect, lm = Ticket("faces", "detect", 1), Ticket("describe", "lm", 0)
    contend(gate, [detect, lm], 1.5, 0.004)
    share = lm.busy_s / (lm.busy_s + detect.busy_s)
    assert 0.1 < share < 0.35, f"weights 4:1 give the low one ~20%, got {share:.0%}"


def test_pacing_holds_a_caller_to_its_duty() -> None:
    gate = Gate(None)
    lm = Ticket("describe", "lm", 0, duty=0.25)
    t0 = time.monotonic()
    for _ in range(10):
        with gate.admit(lm):
            time.sleep(0.01)
    elapsed = time.monotonic() - t0
    assert lm.busy_s / elapsed == pytest.approx(0.25, abs=0.08)
    assert lm.waited_s > 0.15


def test_waiting_past_the_deadline_names_who_holds_the_budget() -> None:
    gate = Gate(1)
    holder = Ticket("describe", "lm", 0)
    waiter = Ticket("faces", "detect", 1)
    entered = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with gate.admit(holder):
            entered.set()
            release.wait(5)

    th = threading.Thread(target=hold)
    th.start()
    entered.wait(5)
    with pytest.raises(AdmissionTimeout, match=r"waited \d+ ms for the CPU budget \(held by: lm\)"):
        gate.enter(waiter, timeout_s=0.05)
    release.set()
    th.join()
    with gate.admit(waiter, timeout_s=0.5):  # free again
        pass
    assert gate.stats().waits >= 1


def test_a_call_larger_than_the_budget_still_runs_alone() -> None:
    gate = Gate(1)
    big = Ticket("llm", "lm", 1, units=4)
    with gate.admit(big, timeout_s=0.1):
        pass
    assert big.calls == 1


@pytest.mark.slow
def test_a_wide_call_is_not_overtaken_forever_by_narrow_ones() -> None:
    gate = Gate(5)
    wide = Ticket("faces", "detect", 1, units=5)
    narrow = [Ticket(f"rec{i}", "encode", 2, units=1) for i in range(2)]
    stop = time.monotonic() + 1.5
    errors: list[BaseException] = []

    def loop(t: Ticket, work: float, offset: float) -> None:
        time.sleep(offset)
        while time.monotonic() < stop:
            try:
                with gate.admit(t, timeout_s=1.0):
                    time.sleep(work)
            except TimeoutError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=loop, args=(wide, 0.03, 0.005))]
    threads += [threading.Thread(target=loop, args=(t, 0.02, 0.01 * i)) for i, t in enumerate(narrow)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert wide.calls >= 3


def test_a_waiter_that_deferred_to_another_is_woken_when_that_one_starts() -> None:
    clock = StillClock()
    gate = Gate(5, clock=clock)
    big = Ticket("faces", "detect", 1, units=5)
    first, second = Ticket("c", "encode", 2), Ticket("d", "encode", 2)
    second.vtime = 1.0  # ``first`` goes first; both fit once ``big`` is done
    started: dict[str, float] = {}
    second_in = threading.Event()

    def call(t: Ticket) -> None:
        t0 = clock()
        with gate.admit(t):
            started[t.owner] = clock() - t0
            if t is first:  # its 0.3 s of work begins once the other is in beside it (or never came)
                second_in.wait(5)
                clock.advance(0.3)
            else:
                second_in.set()

    held = gate.enter(big)
    threads = [threading.Thread(target=call, args=(t,)) for t in (first, second)]
    for th in threads:
        th.start()
    until(lambda: gate.stats().waits == 2)  # both wait behind ``big``
    clock.advance(0.05)
    gate.leave(big, held)
    for th in threads:
        th.join()
    # ``second`` started beside ``first`` when that one started, not once it was done (0.3 s on).
    assert started == {"c": pytest.approx(0.05), "d": pytest.approx(0.05)}


def test_the_pace_wait_does_not_count_against_the_runs_deadline() -> None:
    gate = Gate(1)
    lm = Ticket("describe", "lm", 0, duty=0.25)
    with gate.admit(lm, timeout_s=0.05):
        time.sleep(0.1)
        t_end = time.monotonic()
    pace_s = lm.busy_s * (1 / 0.25 - 1)  # ~0.3 s: six times the deadline below
    with gate.admit(lm, timeout_s=0.05):  # the gate is idle: only the pace holds it, no AdmissionTimeout
        t_start = time.monotonic()
    assert t_start - t_end >= pace_s - 0.001, "the second call was not paced"
    assert lm.waited_s >= pace_s - 0.001
    assert lm.calls == 2


def waiting_call(
    gate: Gate, ticket: Ticket, clock: Callable[[], float] = time.monotonic
) -> tuple[threading.Thread, dict[str, object]]:
    """``ticket``'s next call on a thread of its own; what became of it, and when by ``clock``,
    in the dict."""
    out: dict[str, object] = {}

    def call() -> None:
        try:
            with gate.admit(ticket):
                out["ran_at"] = clock()
        except AdmissionCancelled as exc:
            out["cancelled_at"] = clock()
            out["error"] = exc

    th = threading.Thread(target=call)
    th.start()
    return th, out


def test_cancelling_a_ticket_ends_its_pace_wait_at_once_and_the_call_does_not_run() -> None:
    clock = StillClock()
    gate = Gate(None, clock=clock)
    cancel = threading.Event()
    lm = Ticket("describe", "lm", 0, duty=0.06, cancel=cancel)
    lm.next_at = clock() + 30  # paced: a 2 s step at 6% waits ~30 s for the next
    th, out = waiting_call(gate, lm, clock)
    until(lambda: gate.stats().waits == 1)
    clock.advance(0.1)
    assert out == {}  # still waiting for its pace
    cancel.set()
    t_cancel = clock()
    gate.wake()
    th.join(5)
    assert "ran_at" not in out
    assert out["cancelled_at"] == t_cancel  # the cancel ended it: its pace had 29.9 s to go
    assert "describe: cancelled while waiting" in str(out["error"])
    assert lm.calls == 0
    assert lm.waited_s == pytest.approx(0.1)


def test_cancelling_a_ticket_ends_its_wait_for_the_budget_and_the_gate_stays_usable() -> None:
    gate = Gate(1)
    holder = Ticket("faces", "detect", 1)
    cancel = threading.Event()
    lm = Ticket("describe", "lm", 0, cancel=cancel)
    t_hold = gate.enter(holder)
    th, out = waiting_call(gate, lm)
    time.sleep(0.05)
    cancel.set()
    gate.wake()
    th.join(5)
    assert "cancelled_at" in out
    gate.leave(holder, t_hold)
    cancel.clear()
    with gate.admit(lm, timeout_s=0.5):  # not cancelled any more, and nothing left waiting
        pass
    assert lm.calls == 1


def test_unpace_ends_every_pace_wait_and_the_call_runs() -> None:
    clock = StillClock()
    gate = Gate(1, clock=clock)
    lm = Ticket("describe", "lm", 0, duty=0.06)
    lm.next_at = clock() + 30
    th, out = waiting_call(gate, lm, clock)
    until(lambda: gate.stats().waits == 1)
    clock.advance(0.1)
    t_unpace = clock()
    gate.unpace()
    th.join(5)
    assert out["ran_at"] == t_unpace  # unpace ended it: its pace had 29.9 s to go
    assert lm.duty == 1.0
    with gate.admit(lm, timeout_s=0.5):  # no longer paced after it
        pass
    assert lm.calls == 2


@pytest.mark.slow
def test_a_spare_unit_runs_low_priority_work_beside_the_main_one_and_never_in_its_way() -> None:
    gate = Gate(1, spare=1)
    detect, lm = Ticket("faces", "detect", 1), Ticket("describe", "lm", 0)
    contend(gate, [detect, lm], 0.6, 0.005)
    stats = gate.stats()
    assert stats.detect_lm_overlap_s > 0.3, "the language model ran beside detection"
    assert detect.waited_s < 0.05, "detection never waited for the language model"
    # Two normal callers still share the one main unit: they never run at once.
    other = Ticket("other", "detect", 1)
    started = threading.Event()
    order: list[str] = []

    def hold(name: str, ticket: Ticket) -> None:
        with gate.admit(ticket, timeout_s=5):
            order.append(f"{name}+")
            started.set()
            time.sleep(0.05)
            order.append(f"{name}-")

    a = threading.Thread(target=hold, args=("a", detect))
    a.start()
    started.wait(1)
    hold("b", other)
    a.join()
    assert order == ["a+", "a-", "b+", "b-"]


def test_without_spare_units_low_priority_work_takes_turns_in_the_main_one() -> None:
    gate = Gate(1, spare=0)
    detect, lm = Ticket("faces", "detect", 1), Ticket("describe", "lm", 0)
    contend(gate, [detect, lm], 0.4, 0.005)
    assert gate.stats().detect_lm_overlap_s == 0.0


def test_only_token_decode_that_fits_uses_the_spare_unit() -> None:
    gate = Gate(1, spare=1)
    assert gate._in_spare(Ticket("describe", "lm", 0))
    assert not gate._in_spare(Ticket("record", "encode", 0)), (
        "a low-priority encoder is not paced: main units"
    )
    assert not gate._in_spare(Ticket("describe", "lm", 0, units=2)), "wider than the spare"
    assert not gate._in_spare(Ticket("describe", "lm", 1)), "normal priority"


def test_a_short_call_runs_beside_a_detection_in_the_spare_unit_and_a_long_one_waits() -> None:
    # A viewer's frame must not wait out a 60 ms detection while the spare unit is idle, nor a
    # detection wait for a recording's encode; another model's run takes its turn.
    gate = Gate(1, spare=1)
    detect = Ticket("faces", "detect", 1)
    encode, other = Ticket("view", "encode", 2, short=True), Ticket("plates", "detect", 1)
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        with gate.admit(detect, timeout_s=5):
            started.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        started.wait(1)
        with gate.admit(encode, timeout_s=0.2):
            assert encode.in_spare == 1
        with pytest.raises(AdmissionTimeout, match="held by: detect"), gate.admit(other, timeout_s=0.05):
            pass
    finally:
        release.set()
        holder.join()
    with gate.admit(encode, timeout_s=0.2):  # the main unit free: it goes there first
        assert encode.in_spare == 0
    assert Gate(1, spare=0)._pools(encode, 0.0) == ("main",), "no spare unit: a short call takes its turn too"
