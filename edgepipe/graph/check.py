"""Checking a declared pipeline as a whole: dangling inputs, sinks used as inputs, item types,
cycles. :func:`validate` returns the :class:`Graph` the runtime runs, nodes in topological
order, or raises :class:`GraphError` naming the node and the ``file:line`` that declared it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from edgepipe.core.errors import GraphError
from edgepipe.core.headroom import HEADROOM
from edgepipe.graph.spec import NodeKind, NodeSpec
from edgepipe.graph.types import compatible, type_name


@dataclass(frozen=True)
class Graph:
    """A validated pipeline: nodes in topological order and who consumes whose output."""

    name: str
    nodes: tuple[NodeSpec, ...]
    consumers: dict[str, tuple[str, ...]]
    """Producer id -> ids of the nodes that consume its output (fan-out)."""
    warnings: tuple[str, ...]
    headroom: float = HEADROOM
    """The share of the process's cores the scheduler keeps free (0: ungoverned)."""

    def node(self, node_id: str) -> NodeSpec:
        for spec in self.nodes:
            if spec.node_id == node_id:
                return spec
        raise KeyError(node_id)

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(sorted({n.resource for n in self.nodes}))

    def upstream(self, node_id: str) -> tuple[str, ...]:
        """The nodes whose output reaches ``node_id`` (its inputs, theirs, ...), in graph order."""
        found = set(self.node(node_id).inputs)
        for spec in reversed(self.nodes):  # consumers come after their producers
            if spec.node_id in found:
                found.update(spec.inputs)
        return tuple(n.node_id for n in self.nodes if n.node_id in found)

    def workers(self) -> dict[str, int]:
        """Threads per resource: one per node on it, so no node waits for another's thread
        (each node has at most one call in flight)."""
        return {r: sum(1 for n in self.nodes if n.resource == r) for r in self.resources}


def validate(name: str, nodes: Mapping[str, NodeSpec], headroom: float = HEADROOM) -> Graph:
    """Check the whole graph; raise :class:`GraphError` on the first problem found."""
    if not any(n.kind is NodeKind.SOURCE for n in nodes.values()):
        raise GraphError(f"pipeline '{name}' has no source: declare one with p.source(...)")
    consumers: dict[str, list[str]] = {node_id: [] for node_id in nodes}
    for spec in nodes.values():
        if spec.kind is not NodeKind.SOURCE and not spec.lanes:
            raise GraphError("has no inputs; give it inputs=...", node_id=spec.node_id, where=spec.where)
        for input_id in spec.inputs:
            producer = nodes.get(input_id)
            if producer is None:
                hint = difflib.get_close_matches(input_id, list(nodes), n=1)
                also = f"; did you mean '{hint[0]}'?" if hint else ""
                raise GraphError(
                    f"input '{input_id}' is not a node in this pipeline{also}",
                    node_id=spec.node_id,
                    where=spec.where,
                )
            if producer.kind is NodeKind.SINK:
                raise GraphError(
                    f"input '{input_id}' is a sink, which has no output; make it a stage",
                    node_id=spec.node_id,
                    where=spec.where,
                )
            if not compatible(producer.out_type, spec.in_type):
                raise GraphError(
                    f"takes {type_name(spec.in_type)} but input '{input_id}' produces "
                    f"{type_name(producer.out_type)}",
                    node_id=spec.node_id,
                    where=spec.where,
                )
            consumers[input_id].append(spec.node_id)
    for spec in nodes.values():
        _check_pipeline_name(name, spec)
    order = _topological_order(nodes, consumers)
    warnings = tuple(
        f"node '{n.node_id}' ({n.where}): its output is not consumed by any node; add a sink"
        for n in nodes.values()
        if n.kind is not NodeKind.SINK and not consumers[n.node_id]
    )
    return Graph(
        name=name,
        nodes=tuple(nodes[i] for i in order),
        consumers={k: tuple(v) for k, v in consumers.items()},
        warnings=warnings,
        headroom=headroom,
    )


def _check_pipeline_name(name: str, spec: NodeSpec) -> None:
    """A node whose code names things after the pipeline (``check_pipeline_name(name)``: MQTT
    topics, a client id) refuses a name it cannot use here, before anything starts, rather than
    when it starts."""
    check = getattr(spec.target, "check_pipeline_name", None)
    if not callable(check) or isinstance(spec.target, type):
        return
    try:
        check(name)
    except ValueError as exc:
        raise GraphError(str(exc), node_id=spec.node_id, where=spec.where) from exc


def _topological_order(nodes: Mapping[str, NodeSpec], consumers: dict[str, list[str]]) -> list[str]:
    indegree = {node_id: len(spec.lanes) for node_id, spec in nodes.items()}
    ready = [node_id for node_id, d in indegree.items() if d == 0]
    order: list[str] = []
    while ready:
        node_id = ready.pop(0)
        order.append(node_id)
        for consumer in consumers[node_id]:
            indegree[consumer] -= 1
            if indegree[consumer] == 0:
                ready.append(consumer)
    if len(order) == len(nodes):
        return order
    cycle = _find_cycle(nodes, {n for n, d in indegree.items() if d > 0})
    first = nodes[cycle[0]]
    raise GraphError(
        "is part of a cycle: " + " -> ".join([*cycle, cycle[0]]) + "; channels must flow one way",
        node_id=first.node_id,
        where=first.where,
    )


def _find_cycle(nodes: Mapping[str, NodeSpec], remaining: set[str]) -> list[str]:
    # Walk inputs backwards from any node left over; within the leftover set every node has an
    # input that is also left over, so the walk must revisit a node.
    path: list[str] = []
    seen: dict[str, int] = {}
    node_id = min(remaining)
    while node_id not in seen:
        seen[node_id] = len(path)
        path.append(node_id)
        node_id = next(i for i in nodes[node_id].inputs if i in remaining)
    loop = path[seen[node_id] :]
    loop.reverse()  # report in the direction items flow...
    declared = list(nodes)
    first = min(range(len(loop)), key=lambda i: declared.index(loop[i]))
    return loop[first:] + loop[:first]  # ...from the node declared first
