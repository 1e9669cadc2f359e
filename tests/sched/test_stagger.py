from __future__ import annotations

import gc

from edgepipe.core.scope import RunScope, entered
from edgepipe.sched.stagger import Phases, phases


class Owner:
    pass


def test_streams_across_detectors_take_turns() -> None:
    phases = Phases()
    faces, plates = Owner(), Owner()
    streams = [(faces, "cam0"), (faces, "cam1"), (plates, "cam2"), (plates, "cam3")]
    for owner, source in streams:
        phases.phase(owner, source, 4)
    assert [phases.phase(o, s, 4) for o, s in streams] == [0, 1, 2, 3]
    assert [phases.phase(o, s, 8) for o, s in streams] == [0, 2, 4, 6]
    assert all(phases.phase(o, s, 1) == 0 for o, s in streams)


def test_a_detector_that_is_gone_no_longer_takes_a_turn() -> None:
    phases = Phases()
    old, new = Owner(), Owner()
    phases.phase(old, "cam0", 2)
    phases.phase(new, "cam0", 2)
    assert phases.phase(new, "cam0", 2) == 1
    del old
    gc.collect()
    assert phases.streams == 1
    assert phases.phase(new, "cam0", 2) == 0
    phases.forget(new)
    assert phases.streams == 0


def test_fractional_intervals_spread_the_streams_too() -> None:
    phases = Phases()
    owner = Owner()
    streams = [f"cam{k}" for k in range(4)]
    for source in streams:
        phases.phase(owner, source, 1.3)
    got = [phases.phase(owner, s, 1.3) for s in streams]
    assert got == [0, 1.3 / 4, 2 * 1.3 / 4, 3 * 1.3 / 4], "each stream its own share of the interval"


def test_each_run_numbers_its_streams_apart_and_outside_a_run_the_process_does() -> None:
    one, other = RunScope("one"), RunScope("other")
    with entered(one):
        mine = phases()
        assert phases() is mine
        mine.phase(Owner(), "cam0", 2)
    with entered(other):
        theirs = phases()
        assert theirs is not mine
        assert theirs.streams == 0, "a new run's streams start afresh"
    assert phases() is not mine
    assert phases() is phases()  # the process's
