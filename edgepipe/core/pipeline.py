"""Declaring a pipeline: nodes, the channels between them, and the checks made before running.

A pipeline file builds one :class:`Pipeline`::

    p = Pipeline("demo")
    frames = p.source("frames", camera)
    boxes = p.stage("detect", detect, inputs=frames, policy="latest", queue_size=2)
    p.sink("log", write_line, inputs=boxes)

Declaring checks what it can at once (a duplicate id, an unknown policy) and raises
:class:`GraphError` naming the ``file:line`` of the call. :meth:`Pipeline.validate` checks the
rest (dangling inputs, cycles, item types) and returns the :class:`Graph` the runtime runs.
"""

from __future__ import annotations

import difflib
import enum
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from edgepipe.core.channel import Policy
from edgepipe.core.errors import GraphError
from edgepipe.core.types import compatible, declared_types, type_name

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class NodeKind(enum.StrEnum):
    SOURCE = "source"
    STAGE = "stage"
    SINK = "sink"


class OnError(enum.StrEnum):
    """What a node does when its code raises."""

    RESTART = "restart"
    """Call ``stop()``, wait (exponential backoff), ``start()`` again and carry on."""
    SKIP = "skip"
    """Count and log the error, drop the item that caused it, take the next one."""
    STOP = "stop"
    """Stop the whole pipeline; ``edgepipe run`` exits 1 naming the node."""


@dataclass(frozen=True, slots=True)
class ErrorPolicy:
    """How a node reacts to an exception from its own code."""

    action: OnError = OnError.SKIP
    """``restart``, ``skip`` or ``stop``."""
    max_consecutive: int = 50
    """Failures in a row (no success between) after which ``restart``/``skip`` escalate to
    ``stop``: a node that fails on everything is broken, not unlucky."""
    backoff_initial_s: float = 0.1
    """First wait before a restart; doubled on each consecutive restart."""
    backoff_max_s: float = 5.0
    """Cap of the restart wait."""

    @classmethod
    def parse(cls, value: ErrorPolicy | OnError | str) -> ErrorPolicy:
        if isinstance(value, ErrorPolicy):
            return value
        try:
            return cls(action=OnError(value))
        except ValueError:
            names = ", ".join(a.value for a in OnError)
            raise ValueError(f"unknown error policy {value!r}; use one of: {names}") from None


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node as declared. Immutable; the runtime builds its running state from it."""

    node_id: str
    """Unique in the pipeline; appears in every log line, metric and error about the node."""
    kind: NodeKind
    target: Any
    """The user's code: function, async function, async generator function, iterable, or an
    object with ``process()`` (stages, sinks) or ``__aiter__``/``__iter__`` (sources)."""
    inputs: tuple[str, ...] = ()
    """Ids of the nodes whose output this node consumes (merged into one inbox)."""
    queue_size: int = 8
    """Capacity of the node's inbox channel."""
    policy: Policy = Policy.BLOCK
    """What the inbox does when full: ``block``, ``latest`` or ``drop_new``."""
    on_error: ErrorPolicy = field(default_factory=ErrorPolicy)
    resource: str = "cpu"
    """Executor that runs the node's blocking (synchronous) code."""
    blocking: bool | None = None
    """Whether synchronous code must run off the event loop. None: yes for sync functions and
    iterators, no for in-memory sequences."""
    timeout_s: float | None = None
    """Deadline of one call of the node's code; a late call is abandoned and counted as an error."""
    in_type: Any = None
    out_type: Any = None
    where: str | None = None
    """``file:line`` that declared the node."""

    @property
    def label(self) -> str:
        """The user's code, as a person would name it."""
        target = self.target
        name = getattr(target, "__qualname__", None) or type(target).__qualname__
        return str(name)


@dataclass(frozen=True, slots=True)
class NodeRef:
    """What declaring a node returns; pass it as another node's input."""

    pipeline: Pipeline
    node_id: str


@dataclass(frozen=True)
class Graph:
    """A validated pipeline: nodes in topological order and who consumes whose output."""

    name: str
    nodes: tuple[NodeSpec, ...]
    consumers: dict[str, tuple[str, ...]]
    """Producer id -> ids of the nodes that consume its output (fan-out)."""
    warnings: tuple[str, ...]

    def node(self, node_id: str) -> NodeSpec:
        for spec in self.nodes:
            if spec.node_id == node_id:
                return spec
        raise KeyError(node_id)

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(sorted({n.resource for n in self.nodes}))

    def workers(self) -> dict[str, int]:
        """Threads per resource: one per node on it, so no node waits for another's thread
        (each node has at most one call in flight)."""
        return {r: sum(1 for n in self.nodes if n.resource == r) for r in self.resources}


def _caller_where() -> str | None:
    """``file:line`` of the first frame outside the edgepipe package (the pipeline file)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


InputsArg = NodeRef | str | Sequence[NodeRef | str]


class Pipeline:
    """A graph of nodes joined by bounded channels. Build it, then run it."""

    def __init__(self, name: str = "pipeline") -> None:
        self.name = name
        self._nodes: dict[str, NodeSpec] = {}

    @property
    def nodes(self) -> tuple[NodeSpec, ...]:
        return tuple(self._nodes.values())

    def source(
        self,
        node_id: str,
        target: Any,
        *,
        on_error: ErrorPolicy | OnError | str = OnError.RESTART,
        resource: str = "cpu",
        blocking: bool | None = None,
        timeout_s: float | None = None,
        out_type: Any = None,
    ) -> NodeRef:
        """Declare a node that produces items: an async generator (function), an iterable, or a
        function returning one. Live sources restart by default."""
        return self._add(
            node_id, NodeKind.SOURCE, target, (), 1, Policy.BLOCK, on_error, resource, blocking,
            timeout_s, None, out_type,
        )  # fmt: skip

    def stage(
        self,
        node_id: str,
        target: Any,
        *,
        inputs: InputsArg,
        queue_size: int = 8,
        policy: Policy | str = Policy.BLOCK,
        on_error: ErrorPolicy | OnError | str = OnError.SKIP,
        resource: str = "cpu",
        blocking: bool | None = None,
        timeout_s: float | None = None,
        in_type: Any = None,
        out_type: Any = None,
    ) -> NodeRef:
        """Declare a node that turns each input item into zero or one output item (return None
        for none), or an async generator function that maps the whole input stream."""
        return self._add(
            node_id, NodeKind.STAGE, target, inputs, queue_size, policy, on_error, resource,
            blocking, timeout_s, in_type, out_type,
        )  # fmt: skip

    def sink(
        self,
        node_id: str,
        target: Any,
        *,
        inputs: InputsArg,
        queue_size: int = 8,
        policy: Policy | str = Policy.BLOCK,
        on_error: ErrorPolicy | OnError | str = OnError.SKIP,
        resource: str = "cpu",
        blocking: bool | None = None,
        timeout_s: float | None = None,
        in_type: Any = None,
    ) -> NodeRef:
        """Declare a node that consumes items and emits nothing."""
        return self._add(
            node_id, NodeKind.SINK, target, inputs, queue_size, policy, on_error, resource,
            blocking, timeout_s, in_type, None,
        )  # fmt: skip

    def _add(
        self,
        node_id: str,
        kind: NodeKind,
        target: Any,
        inputs: InputsArg,
        queue_size: int,
        policy: Policy | str,
        on_error: ErrorPolicy | OnError | str,
        resource: str,
        blocking: bool | None,
        timeout_s: float | None,
        in_type: Any,
        out_type: Any,
    ) -> NodeRef:
        where = _caller_where()
        if not isinstance(node_id, str) or not node_id:
            raise GraphError(f"node id must be a non-empty string, got {node_id!r}", where=where)
        if node_id in self._nodes:
            first = self._nodes[node_id].where
            raise GraphError(
                f"duplicate node id (first declared at {first}); node ids must be unique",
                node_id=node_id,
                where=where,
            )
        try:
            parsed_policy = Policy.parse(policy)
            parsed_on_error = ErrorPolicy.parse(on_error)
        except ValueError as exc:
            raise GraphError(str(exc), node_id=node_id, where=where) from None
        if queue_size < 1:
            raise GraphError(f"queue_size must be at least 1, got {queue_size}", node_id=node_id, where=where)
        if timeout_s is not None and timeout_s <= 0:
            raise GraphError(f"timeout_s must be positive, got {timeout_s}", node_id=node_id, where=where)
        declared_in, declared_out = declared_types(target, kind.value)
        spec = NodeSpec(
            node_id=node_id,
            kind=kind,
            target=target,
            inputs=self._input_ids(inputs, node_id, where),
            queue_size=queue_size,
            policy=parsed_policy,
            on_error=parsed_on_error,
            resource=resource,
            blocking=blocking,
            timeout_s=timeout_s,
            in_type=in_type if in_type is not None else declared_in,
            out_type=out_type if out_type is not None else declared_out,
            where=where,
        )
        self._nodes[node_id] = spec
        return NodeRef(self, node_id)

    def _input_ids(self, inputs: InputsArg, node_id: str, where: str | None) -> tuple[str, ...]:
        items: Sequence[NodeRef | str] = [inputs] if isinstance(inputs, NodeRef | str) else inputs
        ids: list[str] = []
        for ref in items:
            if isinstance(ref, NodeRef):
                if ref.pipeline is not self:
                    raise GraphError(
                        f"input '{ref.node_id}' belongs to another Pipeline", node_id=node_id, where=where
                    )
                ids.append(ref.node_id)
            elif isinstance(ref, str):
                ids.append(ref)
            else:
                raise GraphError(
                    f"inputs must be node refs or node ids, got {type(ref).__name__}",
                    node_id=node_id,
                    where=where,
                )
        if len(set(ids)) != len(ids):
            raise GraphError(f"an input is listed twice: {ids}", node_id=node_id, where=where)
        return tuple(ids)

    # -- validation ---------------------------------------------------------------------------

    def validate(self) -> Graph:
        """Check the whole graph; raise :class:`GraphError` on the first problem found."""
        nodes = self._nodes
        if not any(n.kind is NodeKind.SOURCE for n in nodes.values()):
            raise GraphError(f"pipeline '{self.name}' has no source: declare one with p.source(...)")
        consumers: dict[str, list[str]] = {node_id: [] for node_id in nodes}
        for spec in nodes.values():
            if spec.kind is not NodeKind.SOURCE and not spec.inputs:
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
        order = self._topological_order(consumers)
        warnings = tuple(
            f"node '{n.node_id}' ({n.where}): its output is not consumed by any node; add a sink"
            for n in nodes.values()
            if n.kind is not NodeKind.SINK and not consumers[n.node_id]
        )
        return Graph(
            name=self.name,
            nodes=tuple(nodes[i] for i in order),
            consumers={k: tuple(v) for k, v in consumers.items()},
            warnings=warnings,
        )

    def _topological_order(self, consumers: dict[str, list[str]]) -> list[str]:
        indegree = {node_id: len(spec.inputs) for node_id, spec in self._nodes.items()}
        ready = [node_id for node_id, d in indegree.items() if d == 0]
        order: list[str] = []
        while ready:
            node_id = ready.pop(0)
            order.append(node_id)
            for consumer in consumers[node_id]:
                indegree[consumer] -= 1
                if indegree[consumer] == 0:
                    ready.append(consumer)
        if len(order) == len(self._nodes):
            return order
        cycle = self._find_cycle({n for n, d in indegree.items() if d > 0})
        first = self._nodes[cycle[0]]
        raise GraphError(
            "is part of a cycle: " + " -> ".join([*cycle, cycle[0]]) + "; channels must flow one way",
            node_id=first.node_id,
            where=first.where,
        )

    def _find_cycle(self, remaining: set[str]) -> list[str]:
        # Walk inputs backwards from any node left over; within the leftover set every node has
        # an input that is also left over, so the walk must revisit a node.
        start = min(remaining)
        path: list[str] = []
        seen: dict[str, int] = {}
        node_id = start
        while node_id not in seen:
            seen[node_id] = len(path)
            path.append(node_id)
            node_id = next(i for i in self._nodes[node_id].inputs if i in remaining)
        loop = path[seen[node_id] :]
        loop.reverse()  # report in the direction items flow...
        declared = list(self._nodes)
        first = min(range(len(loop)), key=lambda i: declared.index(loop[i]))
        return loop[first:] + loop[:first]  # ...from the node declared first
