"""The scheduler of one run: the CPU budget, the gate, the load meter and the governor, wired
to the runtime.

Made before the run (``Scheduler(graph, headroom=…, governed=…)``), it puts its budget, gate
and split of the cores in the run's scope (:meth:`Scheduler.own`, called by the runtime before
any node starts; :mod:`edgepipe.core.scope`), so models loaded by the nodes' ``start()`` get
their thread counts from this run's budget and their runs go through this run's gate, while a
run beside it in the same process keeps its own. Once every node has started it collects the knobs
(each node's own, through an optional ``governor_knobs(node_id, priority)`` method:
:class:`~edgepipe.sched.hooks.Governable`, plus one
per lossy input lane), logs the plan once, and then every 0.1 s samples the load and lets the
governor act; once a second the CPU ledger (:mod:`~edgepipe.sched.ledger`: where the CPU goes,
per node and kind of work) reads the threads' clocks, governed or not. Once the run is stopping
the governor no longer acts and every pace is lifted (:meth:`~edgepipe.sched.gate.Gate.unpace`):
the drain's work is not held back. :meth:`Scheduler.snapshot` is what ``--stats`` and
``/metrics`` show.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from edgepipe.core.channel import Policy
from edgepipe.core.scope import RunScope
from edgepipe.graph.spec import NodeKind, NodeSpec
from edgepipe.runtime.inflight.instances import AUTO_INSTANCES
from edgepipe.sched import affinity
from edgepipe.sched.budget import BUDGET, DEFAULT_TARGET, CpuBudget, usable_cores
from edgepipe.sched.gate import GATE, Gate
from edgepipe.sched.governor import Governor, Knob
from edgepipe.sched.hooks import Governable, loads_model
from edgepipe.sched.knobs import ThinKnob
from edgepipe.sched.ledger import CpuLedger
from edgepipe.sched.limits import Totals, binding
from edgepipe.sched.load import Load, LoadMeter, accelerator_busy, temperature_c

if TYPE_CHECKING:
    from edgepipe.graph.check import Graph
    from edgepipe.runtime.engine import Runtime

log = logging.getLogger("edgepipe.sched")

SLOW_READ_S = 0.02
"""A temperature read slower than this, :data:`SLOW_READS` times in a row (an I2C sensor), is
not done again on the event loop. One slow read proves nothing: a thread waiting for the GIL
(a switch is 5 ms) or a busy machine makes a plain sysfs read take that long now and then."""

SLOW_READS = 3

LEDGER_INTERVAL_S = 1.0
"""How often the CPU ledger reads every thread's clock (a few tenths of a millisecond)."""


def run_budget(graph: Graph, headroom: float | None = None, governed: bool = True) -> CpuBudget:
    """The CPU budget a run of ``graph`` gets on this machine (``headroom`` None: the graph's;
    0, or ``governed=False``: ungoverned). Raises ``ValueError`` for a headroom out of [0, 1)."""
    headroom = graph.headroom if headroom is None else headroom
    if not (0 <= headroom < 1):
        raise ValueError(f"headroom must be in [0, 1), got {headroom}")
    target = 1 - headroom if headroom > 0 else DEFAULT_TARGET
    streams = sum(1 for spec in graph.nodes if getattr(spec.target, "decodes_video", False))
    models = sum(1 for spec in graph.nodes if loads_model(spec.target))
    return CpuBudget(
        usable_cores(), target, governed and headroom > 0, video_streams=streams, model_nodes=models
    )


class Scheduler:
    """See the module docstring."""

    def __init__(
        self,
        graph: Graph,
        *,
        headroom: float | None = None,
        governed: bool = True,
        interval_s: float = 0.1,
        window_s: float = 1.0,
        settle_s: float = 1.0,
    ) -> None:
        # The run's own: sessions and runs find them through the run's scope (own()).
        self.budget = run_budget(graph, headroom, governed)
        self.governed = self.budget.governed
        self.gate = Gate(self.budget.units if self.governed else None, spare=self.budget.spare_units)
        self._scope: RunScope | None = None
        self.interval_s = interval_s
        self.settle_s = settle_s
        self.meter = LoadMeter(
            self.budget.cores.usable, graph.workers(), window_s=window_s, interval_s=interval_s
        )
        self.governor: Governor | None = None
        self.pinned: list[str] = []
        self.load: Load | None = None
        self.temp_c: float | None = None
        self.accelerator: float | None = None
        self.ledger = CpuLedger(window_s=max(window_s, LEDGER_INTERVAL_S))
        """Where the CPU goes, per node and kind of work (from here on: models' loading counts)."""
        self._t_ledger = 0.0
        self._ledger_failed = False
        self.limits: dict[str, str] = {}
        """Per model node, what held its rate over the last second (:mod:`~edgepipe.sched.limits`)."""
        self._totals: dict[str, Totals] = {}
        log.info("%s", self.budget.describe())
        # Heavy calls on their own cores, the rest (decode, the event loop) on the others: in
        # force from the start of the run (:meth:`run`) to its end.
        self._cores = _own_cores()
        # A model that asks for latency gets the spare units' threads too and needs their
        # cores: heavy is then all of them on 2 cores, and nothing is split.
        latency = any(getattr(spec.target, "prefers_latency", False) for spec in graph.nodes)
        heavy = self.budget.latency_threads if latency else self.budget.units
        self.cores_split = affinity.plan(heavy, self._cores) if self.governed else None

    # -- the run ------------------------------------------------------------------------------

    def own(self, scope: RunScope) -> None:
        """Put this run's budget, gate, split of the cores and calls in flight of
        ``instances="auto"`` in its scope (before any node starts: models take their thread
        counts from the budget as they load)."""
        self._scope = scope
        scope.put(BUDGET, self.budget)
        scope.put(GATE, self.gate)
        scope.put(affinity.SPLIT, self.cores_split)
        scope.put(AUTO_INSTANCES, self.budget.instances)

    async def run(self, runtime: Runtime) -> None:
        """Sample and govern until cancelled (a watcher of the runtime). A failure here is
        logged and the run goes on ungoverned: the scheduler never stops a pipeline."""
        self.ledger.runtime_tid = threading.get_native_id()  # the event loop's thread
        split = self.cores_split
        if split is not None:  # threads started from here on inherit the light cores
            affinity.pin_light()
            log.info("cores: %s", split.describe())
        try:
            await runtime.all_started.wait()
            self._start(runtime)
            await self._measure_and_govern(runtime)
        except asyncio.CancelledError:
            self._sample_ledger(runtime)  # the run's last figures, for the summary at exit
            raise
        except Exception:
            log.exception("scheduler failed: the rest of this run is ungoverned")
            self.governor = None
            if self._scope is not None:  # this run's calls are no longer held, nor pinned
                self._scope.put(GATE, Gate(None))
                self._scope.put(affinity.SPLIT, None)  # no heavy cores without a gate
            if self._cores is not None:
                affinity.unpin(self._cores)
            await asyncio.Event().wait()  # until cancelled with the other watchers
        finally:
            if split is not None and self._cores is not None:  # the event loop's thread
                affinity.unpin(self._cores)

    def _start(self, runtime: Runtime) -> None:
        knobs = self._knobs(runtime)
        if self.governed:
            self.governor = Governor(knobs, self.budget.target, settle_s=self.settle_s)
            self._log_plan()

    async def _measure_and_govern(self, runtime: Runtime) -> None:
        t_slow = 0.0
        slow_ok = True
        slow_reads = 0
        unpaced = False
        while True:
            if runtime.stopping and not unpaced:  # what is left is the drain: not held back
                unpaced = True
                self.gate.unpace()
            now = time.monotonic()
            self.meter.sample(now, _busy_by_resource(runtime))
            self.load = self.meter.load()
            if now - self._t_ledger >= LEDGER_INTERVAL_S:
                self._t_ledger = now
                self._sample_ledger(runtime)
                self._update_limits(runtime, now)
            if slow_ok and now - t_slow >= 1.0:
                t_slow = now
                self.temp_c, self.accelerator = temperature_c(), accelerator_busy()
                took = time.monotonic() - now
                slow_reads = slow_reads + 1 if took > SLOW_READ_S else 0
                if slow_reads >= SLOW_READS:  # a sensor behind a slow bus: not on the event loop's time
                    slow_ok = False
                    log.warning("reading temperature took %.0f ms %d times in a row: no longer read in this "
                                "run (the governor goes on without it)", took * 1000, SLOW_READS)  # fmt: skip
            load = self.load
            governor = None if unpaced else self.governor
            if governor is not None and load is not None and load.window_s >= 0.9 * self.meter.window_s:
                governor.update(load.cpu, now, self.temp_c)
            await asyncio.sleep(self.interval_s)

    def _sample_ledger(self, runtime: Runtime) -> None:
        """The CPU ledger's sample, with each node's items and busy time so far. A failure is
        logged once and the ledger left as it was: it only reports."""
        try:
            self.ledger.sample(_items_and_busy(runtime))
        except Exception:
            if not self._ledger_failed:
                self._ledger_failed = True
                log.exception("the CPU ledger could not be sampled")

    def _update_limits(self, runtime: Runtime, now: float) -> None:
        """Each model node's binding limit over the time since the last call."""
        waited: dict[str, float] = {}
        for ticket in self.gate.tickets():
            waited[ticket.owner] = waited.get(ticket.owner, 0.0) + ticket.waited_s
        gov, load = self.governor, self.load
        target = gov.target_now(self.temp_c) if gov is not None else self.budget.target
        if not self.governed:  # no budget holds an ungoverned run
            target = float("inf")
        for runner in runtime.runners.values():
            if runner.inbox is None or not loads_model(runner.spec.target):
                continue
            lanes = [c.stats() for c in runner.inbox.channels]
            shed = sum(c.shed for c in lanes)
            totals = Totals(now, sum(c.put for c in lanes) + shed, sum(c.dropped for c in lanes) + shed,
                            waited.get(runner.node_id, 0.0))  # fmt: skip
            before = self._totals.get(runner.node_id)
            self._totals[runner.node_id] = totals
            if before is not None and totals.t > before.t:
                self.limits[runner.node_id] = binding(
                    before.window(totals), cpu=load.cpu if load is not None else None, target=target,
                    level=gov.level if gov is not None else 0,
                )  # fmt: skip

    def _knobs(self, runtime: Runtime) -> list[Knob]:
        knobs: list[Knob] = []
        for runner in runtime.runners.values():
            spec = runner.spec
            if isinstance(spec.target, Governable):
                for knob in spec.target.governor_knobs(spec.node_id, int(spec.priority)):
                    if getattr(knob, "pinned", False):
                        self.pinned.append(f"{spec.node_id} {knob.kind}")
                    else:
                        knobs.append(knob)
            if runner.inbox is not None:
                lanes = {lane.name: lane.source for lane in spec.lanes}
                for channel in runner.inbox.channels:
                    producer = runtime.graph.node(lanes[channel.name])
                    if channel.policy is not Policy.BLOCK and _carries_frames(producer):
                        knobs.append(ThinKnob(spec.node_id, int(spec.priority), channel))
        return knobs

    def _log_plan(self) -> None:
        assert self.governor is not None
        order = [f"{k.node_id} {k.kind}" for k, level in self.governor.ladder if level == 1]
        log.info(
            "governor: keeps CPU at or under %.0f%% of %g core(s); slows, in order: %s%s",
            self.budget.target * 100, self.budget.cores.usable, ", ".join(order) or "nothing (no knobs)",
            f"; pinned: {', '.join(self.pinned)}" if self.pinned else "",
        )  # fmt: skip

    # -- figures ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The scheduler's figures (plain data: ``--stats``, ``/metrics`` and JSON read it)."""
        budget = self.budget
        gate = self.gate.stats()
        load = self.load
        gov = self.governor
        return {
            "cores": budget.cores.usable,
            "limited_by": budget.cores.limited_by,
            "target": budget.target,
            "target_now": gov.target_now(self.temp_c) if gov is not None else budget.target,
            "governed": self.governed,
            "cpu": round(load.cpu, 4) if load is not None else None,
            "window_s": round(load.window_s, 3) if load is not None else None,
            "resources": load.resources if load is not None else {},
            "temp_c": self.temp_c,
            "accelerator": self.accelerator,
            "units": gate.units,
            "threads_per_model": budget.threads,
            "level": gov.level if gov is not None else 0,
            "rungs": gov.rungs if gov is not None else 0,
            "ups": gov.ups if gov is not None else 0,
            "downs": gov.downs if gov is not None else 0,
            "knobs": gov.settings() if gov is not None else [],
            "pinned": list(self.pinned),
            "last_decision": gov.decisions[-1].text(gov.rungs) if gov is not None and gov.decisions else None,
            "heavy_busy_s": {k: round(v, 3) for k, v in gate.busy_s.items()},
            "overlap_s": round(gate.overlap_s, 3),
            "detect_lm_overlap_s": round(gate.detect_lm_overlap_s, 3),
            "waits": gate.waits,
            "waited_s": round(gate.waited_s, 3),
            "cpu_ledger": self.ledger.snapshot(),
            "limits": dict(self.limits),
        }


def _own_cores() -> frozenset[int] | None:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _carries_frames(producer: NodeSpec) -> bool:
    """A lane the governor may thin: frames, from a source (or a stage that says it makes
    frames), not results, whose loss would save little and skew what consumers count."""
    out = getattr(producer.out_type, "__name__", str(producer.out_type or ""))
    return producer.kind is NodeKind.SOURCE or "Frame" in out


def _busy_by_resource(runtime: Runtime) -> dict[str, float]:
    busy: dict[str, float] = {}
    for runner in runtime.runners.values():
        resource = runner.spec.resource
        busy[resource] = busy.get(resource, 0.0) + runner.metrics.busy_ns / 1e9
    return busy


def _items_and_busy(runtime: Runtime) -> dict[str, tuple[int, float]]:
    """Per node: items handled (a source's emitted, others' taken) and busy seconds so far."""
    out: dict[str, tuple[int, float]] = {}
    for runner in runtime.runners.values():
        m = runner.metrics
        inbox = runner.inbox
        items = m.items_out if inbox is None else sum(c.stats().got for c in inbox.channels)
        out[runner.node_id] = (items, m.busy_ns / 1e9)
    return out
