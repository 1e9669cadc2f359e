from __future__ import annotations

from edgepipe.sched.knobs import EVERY, EveryKnob


def test_an_every_knob_starts_its_detector_at_full_rate() -> None:
    class Det:
        every_now = 16  # what the governor left at the end of an earlier run

    det = Det()
    EveryKnob("faces", 1, det, 1)
    assert det.every_now == 1


def test_an_every_knob_says_the_setting_it_just_made_with_what_keeping_up_needs() -> None:
    class Det:
        every_now = 1.0
        keep_up_interval = 6.0

    det = Det()
    knob = EveryKnob("faces", 1, det, 1)
    knob.set(EVERY.index(2))  # a factor of 2
    assert knob.describe() == "model on 1 frame in 12 per source (keeping up: 6)"
    det.keep_up_interval = 1.0
    assert knob.describe() == "model on 1 frame in 2 per source"
