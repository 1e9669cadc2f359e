from __future__ import annotations

import itertools

from edgepipe.core.context import CallLimit
from edgepipe.core.scope import RunScope, entered
from edgepipe.sched.budget import BUDGET, Cores, CpuBudget
from edgepipe.sched.governor import WINDOW
from edgepipe.sched.knobs import (
    DUTIES,
    EVERY,
    PINNED_DUTIES,
    SPARE_DUTIES,
    EveryKnob,
    InstancesKnob,
    PaceKnob,
    rungs,
)


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


def test_the_tables_are_kept_whole_on_the_cores_they_were_tuned_on() -> None:
    for cores in (1.0, 1.5, 2.0):
        assert rungs(SPARE_DUTIES, 1, cores) == SPARE_DUTIES
        assert rungs(DUTIES, 1, cores) == DUTIES
        assert rungs(DUTIES, 2, cores) == DUTIES


def test_on_more_cores_steps_are_merged_up_to_the_governors_window() -> None:
    for table in (SPARE_DUTIES, DUTIES):
        for cores in (4.0, 8.0, 16.0, 64.0):
            kept = rungs(table, 1, cores)
            assert (kept[0], kept[-1]) == (table[0], table[-1])  # unpaced, and the floor
            assert set(kept) <= set(table)
            assert len(kept) < len(table)
            for a, b in itertools.pairwise(kept):
                one_step = table[table.index(a) + 1] == b
                assert one_step or (a - b) / cores <= WINDOW + 1e-9, (cores, a, b)
    assert rungs(SPARE_DUTIES, 1, 8.0) == (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)  # 2.5 points each


def test_knobs_take_their_rungs_from_the_runs_budget() -> None:
    for cores, spare in ((2.0, SPARE_DUTIES), (8.0, (1.0, 0.8, 0.6, 0.4, 0.2, 0.0))):
        scope = RunScope("knobs")
        scope.put(BUDGET, CpuBudget(Cores(cores, int(cores), None)))
        with entered(scope):
            pace = PaceKnob("describe", 0, [])
            instances = InstancesKnob("faces", 1, [], CallLimit(2, 2))
        assert pace.duties == rungs(DUTIES, 1, cores)
        assert instances.duties == spare
    assert PaceKnob("faces", 1, [], PINNED_DUTIES).duties == PINNED_DUTIES  # a detector's own: as given
