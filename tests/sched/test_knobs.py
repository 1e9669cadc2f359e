from __future__ import annotations

from edgepipe.sched.knobs import EveryKnob


def test_an_every_knob_starts_its_detector_at_full_rate() -> None:
    class Det:
        every_now = 16  # what the governor left at the end of an earlier run

    det = Det()
    EveryKnob("faces", 1, det, 1)
    assert det.every_now == 1
