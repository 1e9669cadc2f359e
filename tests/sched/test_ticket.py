"""A caller's second call in the spare unit (``LENT``): taken only beside its first, paced by
the governor, never in a short call's way, and not lent again for a while after it ran much
slower than the caller's calls in the main units (:mod:`edgepipe.sched.ticket`)."""

from __future__ import annotations

import pytest

from edgepipe.sched.gate import AdmissionTimeout, Gate, Ticket
from edgepipe.sched.ticket import LEND_RETRY_S


class Clock:
    """A gate's clock that moves only when told."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_callers_second_call_takes_the_spare_unit_beside_its_first_and_no_one_elses_does() -> None:
    # A detector with two calls in flight on 2 cores x 0.7: its first holds the main unit, the
    # second runs in the spare one; a third of its own, or another model's, waits for the main.
    gate = Gate(1, spare=1, clock=Clock())
    faces, plates = Ticket("faces", "detect", 1), Ticket("plates", "detect", 1)
    first = gate.enter(faces)
    second = gate.enter(faces, timeout_s=0.0)
    assert (first.pool, second.pool) == ("main", "lent")
    assert (faces.in_main, faces.in_spare) == (1, 1)
    with pytest.raises(AdmissionTimeout):
        gate.enter(faces, timeout_s=0.0)
    with pytest.raises(AdmissionTimeout, match="held by: detect"):
        gate.enter(plates, timeout_s=0.0)
    gate.leave(faces, second)
    gate.leave(faces, first)
    assert (faces.in_main, faces.in_spare, faces.calls) == (0, 0, 2)
    alone = gate.enter(plates)  # nothing of its own in the main unit: it takes the main one
    assert alone.pool == "main"
    gate.leave(plates, alone)


def test_a_short_call_is_never_held_by_a_second_call_in_the_spare_unit() -> None:
    gate = Gate(1, spare=1, clock=Clock())
    faces, view = Ticket("faces", "detect", 1), Ticket("view", "encode", 2, short=True)
    first, second = gate.enter(faces), gate.enter(faces, timeout_s=0.0)
    encode = gate.enter(view, timeout_s=0.0)  # main and spare both held: it runs beside them
    assert encode.pool == "over"
    gate.leave(view, encode)
    gate.leave(faces, second)
    encode = gate.enter(view, timeout_s=0.0)  # the spare unit free again: it goes there
    assert encode.pool == "spare"
    gate.leave(view, encode)
    gate.leave(faces, first)


def test_the_governor_paces_a_second_call_in_the_spare_unit_and_can_shed_it() -> None:
    clock = Clock()
    gate = Gate(1, spare=1, clock=clock)
    faces = Ticket("faces", "detect", 1, spare_duty=0.25)
    first = gate.enter(faces)
    second = gate.enter(faces, timeout_s=0.0)
    clock.t += 0.1  # a 100 ms run in the spare unit
    gate.leave(faces, second)
    assert faces.spare_next_at == pytest.approx(clock.t + 0.3), "25% of the time: 300 ms off for 100 on"
    with pytest.raises(AdmissionTimeout):
        gate.enter(faces, timeout_s=0.0)
    clock.t += 0.31
    again = gate.enter(faces, timeout_s=0.0)
    assert again.pool == "lent"
    gate.leave(faces, again)
    faces.spare_duty, faces.spare_next_at = 0.0, 0.0  # shed: one call in flight
    with pytest.raises(AdmissionTimeout):
        gate.enter(faces, timeout_s=0.0)
    gate.unpace()  # the run stops: nothing is held back
    assert faces.spare_duty == 1.0
    again = gate.enter(faces, timeout_s=0.0)
    assert again.pool == "lent"
    gate.leave(faces, again)
    gate.leave(faces, first)


def test_a_caller_that_can_put_its_work_off_asks_whether_a_call_would_start_at_once() -> None:
    clock = Clock()
    gate = Gate(1, spare=1, clock=clock)
    faces = Ticket("faces", "detect", 1, spare_duty=0.5)
    assert gate.would_admit(faces), "the main unit is free"
    assert gate.would_admit(faces, beside=True), "beside a call of its own not in yet: the spare unit"
    first = gate.enter(faces)
    assert gate.would_admit(faces), "the spare unit, lent beside its own call"
    assert gate.would_admit(faces, beside=True)
    second = gate.enter(faces, timeout_s=0.0)
    clock.t += 0.1
    gate.leave(faces, second)
    assert not gate.would_admit(faces), "paced: its share of the spare units is used up for now"
    assert (faces.in_main, gate.stats().waits) == (1, 0), "asking left the gate as it was"
    clock.t += 0.11
    assert gate.would_admit(faces)
    gate.leave(faces, first)
    assert faces.calls == 2, "asking took nothing"


def test_a_second_call_much_slower_than_the_first_ones_is_not_lent_again_for_a_while() -> None:
    # The spare unit's core busy with decoders: a lent run took 2.5x a main one. Its frame's
    # result (and every result of its cameras, held to the slowest) would come that late.
    clock = Clock()
    gate = Gate(1, spare=1, clock=clock)
    faces = Ticket("faces", "detect", 1)

    def call(seconds: float, pool: str) -> None:
        held = gate.enter(faces, timeout_s=0.0)
        assert held.pool == pool
        clock.t += seconds
        gate.leave(faces, held)

    call(0.16, "main")
    first = gate.enter(faces)
    call(0.40, "lent")
    assert faces.spare_next_at == pytest.approx(clock.t + LEND_RETRY_S)
    assert not gate.would_admit(faces), "held back for a while"
    clock.t += LEND_RETRY_S
    call(0.40, "lent")  # tried again: still slow, the wait doubles
    assert faces.spare_next_at == pytest.approx(clock.t + 2 * LEND_RETRY_S)
    clock.t += 2 * LEND_RETRY_S
    call(0.19, "lent")  # the decoders gone quiet: within 1.3x, lent at once again
    assert (faces.lend_backoff.attempt, faces.spare_next_at) == (0, 0.0)
    assert gate.would_admit(faces)
    gate.leave(faces, first)
