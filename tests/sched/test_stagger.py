from __future__ import annotations

from edgepipe.sched.stagger import Phases


def test_streams_across_detectors_take_turns() -> None:
    phases = Phases()
    streams = [("faces", "cam0"), ("faces", "cam1"), ("plates", "cam2"), ("plates", "cam3")]
    for owner, source in streams:
        phases.phase(owner, source, 4)
    assert [phases.phase(o, s, 4) for o, s in streams] == [0, 1, 2, 3]
    assert [phases.phase(o, s, 8) for o, s in streams] == [0, 2, 4, 6]
    assert all(phases.phase(o, s, 1) == 0 for o, s in streams)
    phases.clear()
    assert phases.streams == 0
