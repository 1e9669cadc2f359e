"""What a pipeline would reserve, before anything starts: ``edgepipe run FILE --plan``.

A node's code says what it would allocate with an optional method (:class:`Plannable`)::

    def plan_memory(self, plan: MemoryPlan, node: PlanNode) -> object | None:

It reserves in ``plan`` what its ``start()`` and first items would reserve in the process's
plan, computed by the same size functions (a frame pool from its consumers' holds and the
frame size, input tensors, a KV cache from the model file's shapes, model weights), without
opening a model or allocating anything. What it returns is what it would produce (a source
returns its :class:`~edgepipe.media.FrameSize`): its consumers find it in ``node.inputs``. A
size that cannot be known now is said with :meth:`PlanNode.unknown` instead.

:func:`plan_graph` calls the hooks in topological order on a fresh dry-run
:class:`~edgepipe.planning.memory.MemoryPlan` (never the process's) and returns a
:class:`PlanReport`: every reservation, the budget, and whether it fits. The runtime never
calls ``plan_memory``; the capacity planner does, through :func:`plan_graph`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from edgepipe.core.errors import EdgepipeError, error_text
from edgepipe.core.scope import RunScope
from edgepipe.graph.check import Graph
from edgepipe.planning.memory import MemoryBudgetError, MemoryPlan, Reservation
from edgepipe.runtime.engine import Runtime
from edgepipe.runtime.inflight.instances import AUTO_INSTANCES
from edgepipe.runtime.node import source_states
from edgepipe.wire.redact import redact_text

log = logging.getLogger(__name__)


@dataclass
class PlanNode:
    """A node as its ``plan_memory`` hook sees it."""

    node_id: str
    """The owner of what it reserves (as at run time)."""
    consumer_holds: tuple[int, ...]
    """What the runtime would give :attr:`NodeContext.consumer_holds
    <edgepipe.core.context.NodeContext.consumer_holds>`: per consumer, how many of this node's
    items it can hold at once."""
    inputs: Mapping[str, Any]
    """Per input lane: what its producer's hook returned (a frame size), None when it said nothing."""
    unknowns: list[UnknownSize] = field(default_factory=list)
    sources: tuple[str, ...] = ()
    """The sources upstream that report their state (what :attr:`NodeContext.sources
    <edgepipe.core.context.NodeContext.sources>` will hold at run time), by node id."""
    instances: int = 1
    """Its calls in flight at run time (:attr:`NodeContext.instances
    <edgepipe.core.context.NodeContext.instances>`): a model node's input tensors are per call."""

    def unknown(self, what: str, why: str) -> None:
        """Say that ``what`` would be allocated but its size cannot be known now, and why
        (secrets in a URL it quotes are masked: the plan is printed)."""
        self.unknowns.append(UnknownSize(self.node_id, redact_text(what), redact_text(why)))


@dataclass(frozen=True, slots=True)
class UnknownSize:
    """A buffer a node would allocate, of a size the plan cannot tell."""

    owner: str
    what: str
    why: str


class _Instances:
    """Stands for a run's scheduler where a plan needs only what ``instances="auto"`` is."""

    def __init__(self, count: int) -> None:
        self.count = count

    def own(self, scope: RunScope) -> None:
        scope.put(AUTO_INSTANCES, self.count)

    async def run(self, runtime: Runtime) -> None:  # pragma: no cover - a plan never runs
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:  # pragma: no cover
        return {}


@runtime_checkable
class Plannable(Protocol):
    """A node's code that can say what it would reserve (see the module docstring): what
    :func:`plan_graph` looks for, by ``isinstance``."""

    def plan_memory(self, plan: MemoryPlan, node: PlanNode) -> object | None:
        """Reserve in ``plan`` what :meth:`start` and the first items would; return what the
        node would produce (a source's frame size), or None."""
        ...


@dataclass(frozen=True)
class PlanReport:
    """What a pipeline would reserve, against the budget."""

    pipeline: str
    nodes: tuple[str, ...]
    """The graph's node ids, in topological order."""
    entries: tuple[Reservation, ...]
    """In the order they would be reserved (nodes in topological order)."""
    unknowns: tuple[UnknownSize, ...]
    failures: tuple[tuple[str, str], ...]
    """(node id, why) for each node whose hook failed: its part of the plan is missing."""
    budget_bytes: int | None
    """None: this system does not say how much memory there is."""
    limit_bytes: int | None
    budget_frac: float
    refusal: MemoryBudgetError | None
    """What the first reservation past the budget would raise at run time."""

    @property
    def host_bytes(self) -> int:
        """What counts against the budget."""
        return sum(r.nbytes for r in self.entries if not r.device)

    def device_bytes(self) -> dict[str, int]:
        """Per device (``cuda:0``): what would live there, outside the budget."""
        totals: dict[str, int] = {}
        for r in self.entries:
            if r.device:
                totals[r.device] = totals.get(r.device, 0) + r.nbytes
        return totals

    @property
    def crossing(self) -> Reservation | None:
        """The first reservation that takes the host total past the budget (the one the run
        would refuse), or None."""
        budget = self.budget_bytes
        held = 0
        for r in self.entries:
            if r.device:
                continue
            held += r.nbytes
            if budget is not None and held > budget:
                return r
        return None

    @property
    def fits(self) -> bool:
        return self.crossing is None


def plan_graph(graph: Graph, plan: MemoryPlan | None = None, *, auto_instances: int = 1) -> PlanReport:
    """Ask every node of ``graph`` what it would reserve; nothing is started or allocated.

    ``plan`` defaults to a fresh dry-run plan with the process's budget (from the environment).
    ``auto_instances``: the calls in flight a node declared with ``instances="auto"`` would run
    (its run's CPU budget's, :attr:`~edgepipe.sched.budget.CpuBudget.instances`). A hook that
    raises is reported in :attr:`PlanReport.failures` and the others still run. Blocking: a hook
    may open an input briefly to read its frame size.
    """
    if plan is None:
        plan = MemoryPlan(refuse=False)
    # The runtime's own wiring says what each consumer holds (lane sizes, calls in flight,
    # batches): built here exactly as a run builds it, and never started.
    runners = Runtime(graph, scheduler=_Instances(auto_instances)).runners
    produced: dict[str, object | None] = {}
    unknowns: list[UnknownSize] = []
    failures: list[tuple[str, str]] = []
    for spec in graph.nodes:
        node = PlanNode(
            spec.node_id,
            tuple(runners[spec.node_id].holds),
            {lane.name: produced.get(lane.source) for lane in spec.lanes},
            sources=tuple(source_states(graph, spec.node_id)),
            instances=runners[spec.node_id].instances,
        )
        target = spec.target
        produced[spec.node_id] = None
        if isinstance(target, Plannable) and not isinstance(target, type):
            try:
                produced[spec.node_id] = target.plan_memory(plan, node)
            except Exception as exc:  # one node's failure must not hide the rest of the plan
                log.debug("[%s] plan_memory() failed", spec.node_id, exc_info=exc)
                # Our own errors say what is wrong in their message; anything else needs its type.
                why = str(exc) if isinstance(exc, EdgepipeError) and str(exc) else error_text(exc)
                failures.append((spec.node_id, redact_text(why)))  # it may quote a camera's URL
        unknowns += node.unknowns
    return PlanReport(
        pipeline=graph.name,
        nodes=tuple(spec.node_id for spec in graph.nodes),
        entries=tuple(sorted(plan.entries(), key=lambda r: r.key)),
        unknowns=tuple(unknowns),
        failures=tuple(failures),
        budget_bytes=plan.budget_bytes,
        limit_bytes=plan.limit_bytes,
        budget_frac=plan.budget_frac,
        refusal=plan.first_refusal,
    )
