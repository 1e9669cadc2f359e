"""The scheduler in a real run: it measures, collects knobs, and slows a node that burns CPU."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest

from edgepipe import NodeError, Pipeline, RunReport
from edgepipe.planning.memory import memory_plan
from edgepipe.runner import RunConfig, run_async
from edgepipe.sched import EveryKnob, Scheduler, cpu_budget, gate
from edgepipe.testing import run_pipeline

pytestmark = pytest.mark.solo  # the governor's decisions follow the machine's load


async def ticks() -> AsyncIterator[int]:
    n = 0
    while True:
        yield n
        n += 1
        await asyncio.sleep(0.01)


class Burner:
    """Burns 15 ms of CPU on one item in ``every_now``: a detector in miniature."""

    loads_model = True  # counted as the run's model (and named a limit in --stats)

    def __init__(self) -> None:
        self.every_now: float = 1
        self.seen = 0
        self.levels: set[float] = set()

    def governor_knobs(self, node_id: str, priority: int) -> list[EveryKnob]:
        return [EveryKnob(node_id, priority, self, 1)]

    def process(self, item: int) -> int:
        self.seen += 1
        self.levels.add(self.every_now)
        if self.seen // self.every_now != (self.seen - 1) // self.every_now:  # 1 in every_now
            end = time.perf_counter() + 0.015
            while time.perf_counter() < end:
                pass
        return item


def burning(headroom: float) -> tuple[Pipeline, Burner]:
    burner = Burner()
    p = Pipeline("burn", headroom=headroom)
    src = p.source("ticks", ticks)
    out = p.stage("burn", burner, inputs=src, policy="latest", queue_size=1)
    p.sink("drop", lambda x: None, inputs=out)
    return p, burner


@pytest.mark.slow
def test_the_governor_slows_a_node_over_the_target_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="edgepipe.sched")
    p, burner = burning(headroom=0.85)  # target 15% of the cores: the burner alone is far over it
    report = run_pipeline(p, RunConfig(duration_s=4.0))
    sched = report.stats.sched
    assert sched is not None
    assert sched["governed"]
    assert sched["ups"] >= 1
    assert sched["level"] >= 1
    assert max(burner.levels) > 1, "the interval was raised"
    assert gate().units is None, "after the run, the process's gate holds nothing back"
    assert sched["cpu"] is not None
    assert sched["window_s"] == pytest.approx(1.0, abs=0.15)
    assert "cpu" in sched["resources"]
    assert [k["node"] for k in sched["knobs"]] == ["burn", "burn"]  # its interval, its lane
    plans = [r.getMessage() for r in caplog.records if "slows, in order" in r.getMessage()]
    cores = f"{sched['cores']:g}"
    assert plans == [
        f"governor: keeps CPU at or under 15% of {cores} core(s); slows, in order: burn every, burn thin"
    ]
    decisions = [r.getMessage() for r in caplog.records if r.getMessage().startswith("governor: CPU")]
    assert decisions
    assert "target 15%" in decisions[0]
    assert "burn model on 1 frame in" in decisions[0]


@pytest.mark.slow
def test_headroom_0_runs_ungoverned_but_still_measures() -> None:
    p, burner = burning(headroom=0.0)
    report = run_pipeline(p, RunConfig(duration_s=2.5))
    sched = report.stats.sched
    assert sched is not None
    assert not sched["governed"]
    assert sched["level"] == 0
    assert sched["units"] is None
    assert sched["cpu"] is not None
    assert sched["cpu"] > 0
    assert burner.levels == {1}
    # 15 ms an item, one every 10 ms, nothing holding it back: the model binds.
    assert sched["limits"] == {"burn": "model"}
    # The CPU ledger, ungoverned too: the burner's 15 ms an item are its code's, and what the
    # kinds add up to is the process's CPU, little of it left unattributed.
    ledger = sched["cpu_ledger"]
    burn = ledger["nodes"]["burn"]
    assert burn["kinds_s"]["code"] > 0.5
    # 15 ms of wall time an item, CPU at most that (less when the machine's other work takes
    # the core meanwhile: what the two columns side by side show)
    assert 14.5 < burn["run_wall_ms_per_item"] < 30
    assert 3 < burn["run_cpu_ms_per_item"] <= 1.05 * burn["run_wall_ms_per_item"]
    assert sum(ledger["kinds_s"].values()) == pytest.approx(ledger["process_s"], abs=0.01)
    assert ledger["kinds_s"]["overhead"] < 0.2 * ledger["process_s"], ledger["kinds_s"]
    assert ledger["kinds_s"]["runtime"] > 0  # the event loop's own
    assert ledger["sample_ms"] < 5


def test_no_governor_keeps_the_budget_for_threads() -> None:
    p, _ = burning(headroom=0.3)
    scheduler = Scheduler(p.validate(), governed=False)
    assert not scheduler.governed
    assert scheduler.gate.units is None
    assert scheduler.budget.target == pytest.approx(0.7)


class FailsToStart:
    def start(self) -> None:
        raise RuntimeError("no camera here")

    def process(self, item: int) -> int:
        return item


def test_a_run_that_fails_at_start_leaves_the_process_budget_and_gate_as_they_were() -> None:
    before = cpu_budget()
    p = Pipeline("fails", headroom=0.85)
    p.sink("bad", FailsToStart(), inputs=p.source("ticks", ticks), on_error="stop")
    with pytest.raises(NodeError):
        run_pipeline(p, RunConfig(duration_s=2.0))
    assert gate().units is None
    assert cpu_budget() is before


class Sees:
    """A stage whose start() (on a hook thread) and calls (on its resource's) note the gate,
    budget and memory plan they reach, and reserve a buffer named after its run."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.seen: set[tuple[int, int, int]] = set()
        self.units: set[int | None] = set()

    def _note(self) -> None:
        self.seen.add((id(gate()), id(cpu_budget()), id(memory_plan())))
        self.units.add(gate().units)

    def start(self) -> None:
        self._note()
        self.buffer = memory_plan().reserve(self.run, f"buffer of {self.run}", 1000, holder=self)

    def process(self, item: int) -> int:
        self._note()
        time.sleep(0.002)  # the other run's calls come meanwhile
        return item


def test_two_governed_runs_at_once_in_one_process_each_keep_their_own() -> None:
    before = (gate(), cpu_budget())
    stages: dict[str, Sees] = {}

    async def one(name: str, headroom: float) -> RunReport:
        p = Pipeline(name, headroom=headroom)
        stages[name] = Sees(name)
        p.sink("drop", lambda x: None, inputs=p.stage("see", stages[name], inputs=p.source("items", ticks)))
        return await run_async(p, RunConfig(duration_s=0.4))

    async def both() -> list[RunReport]:
        return await asyncio.gather(one("a", 0.5), one("b", 0.0))

    reports = dict(zip("ab", asyncio.run(both()), strict=True))
    for name, report in reports.items():
        (seen,) = stages[name].seen  # one gate, budget and plan, the same on every thread
        assert seen[:2] != (id(before[0]), id(before[1]))  # the run's own, not the process's
        assert report.stats.memory is not None
        assert [r["what"] for r in report.stats.memory["reservations"]] == [f"buffer of {name}"]
        assert report.stats.node("see").items_in > 20
    assert stages["a"].seen != stages["b"].seen
    assert None not in stages["a"].units  # a: governed, its gate holds calls back
    assert stages["b"].units == {None}  # b: headroom 0, its gate holds nothing back
    assert len({next(iter(s.seen))[2] for s in stages.values()}) == 2  # a memory plan each
    governed = {name: (r.stats.sched or {}).get("governed") for name, r in reports.items()}
    assert governed == {"a": True, "b": False}
    assert (gate(), cpu_budget()) == before  # the process's were never swapped


class BadKnobs(Burner):
    def governor_knobs(self, node_id: str, priority: int) -> list[EveryKnob]:
        raise RuntimeError("a bug in a node's knobs")


@pytest.mark.slow
def test_a_failing_scheduler_logs_and_the_run_goes_on_ungoverned(caplog: pytest.LogCaptureFixture) -> None:
    p = Pipeline("burn", headroom=0.85)
    out = p.stage("burn", BadKnobs(), inputs=p.source("ticks", ticks), policy="latest", queue_size=1)
    p.sink("drop", lambda x: None, inputs=out)
    report = run_pipeline(p, RunConfig(duration_s=1.5))
    assert report.stopped_by == "stop"
    assert report.stats.node("drop").items_in > 10
    assert any("scheduler failed" in r.getMessage() for r in caplog.records)
    assert gate().units is None


@pytest.mark.parametrize(("slow", "read_on"), [(1, True), (3, False)])
@pytest.mark.slow
def test_temperature_is_given_up_only_after_slow_reads_in_a_row(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, slow: int, read_on: bool
) -> None:
    from edgepipe.sched import scheduler as module

    reads: list[float] = []

    def temperature() -> float:  # the first `slow` reads are slow, as a busy machine makes them
        if len(reads) < slow:
            time.sleep(module.SLOW_READ_S * 1.5)
        reads.append(time.monotonic())
        return 40.0

    monkeypatch.setattr(module, "temperature_c", temperature)
    caplog.set_level(logging.WARNING, logger="edgepipe.sched")
    p, _ = burning(headroom=0.3)
    # Read about once a second: the fourth read, due at ~3 s, is the one that must not come.
    run_pipeline(p, RunConfig(duration_s=4.0))
    given_up = [r for r in caplog.records if "no longer read" in r.getMessage()]
    assert (len(reads) > slow) is read_on, reads
    assert bool(given_up) is not read_on


def test_the_runs_models_are_counted_and_a_model_asking_for_latency_gets_every_heavy_core() -> None:
    p, burner = burning(headroom=0.3)
    scheduler = Scheduler(p.validate())
    budget = scheduler.budget
    assert budget.model_nodes == 1
    assert budget.video_streams == 0
    if budget.units < budget.cores.affinity:  # one-thread calls leave the light cores split off
        assert scheduler.cores_split is not None
    burner.prefers_latency = True  # type: ignore[attr-defined]
    wide = Scheduler(p.validate())
    if wide.budget.latency_threads >= wide.budget.cores.affinity:  # 2 cores: its threads need both
        assert wide.cores_split is None
