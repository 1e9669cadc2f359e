"""Declaring a pipeline: nodes, the channels between them, and the checks made before running.

A pipeline file builds one :class:`Pipeline`::

    p = Pipeline("demo")
    frames = p.source("frames", VideoSource("rtsp://camera/stream"))
    boxes = p.stage("detect", detect, inputs=frames)
    p.sink("log", write_line, inputs=boxes)

Each input of a node is a lane of its inbox with a policy and size of its own; ``policy`` and
``queue_size`` are the defaults of its lanes, and a lane can say otherwise::

    p.stage("annotate", Annotate(), inputs={"frames": (frames, "block", 4), "boxes": boxes})

What nobody declares follows from the producer: a lane fed frames by a live source (a source
whose code says ``live = True``, as a :class:`~edgepipe.media.VideoSource` of a camera, a stream
or a synthetic scene does, and whose items are of a type that says ``perishable = True``, as
:class:`~edgepipe.media.Frame` does) is ``latest`` with one slot: the newest picture, never a
queue of old ones. Any other lane is ``block`` with 8 slots (lossless: a file's frames, results).
Either may be declared otherwise (``policy=``, ``queue_size=``, per lane with :class:`Input`).

Synchronous code runs on a thread unless it runs on the loop (``on_loop=True``, or the code
declares it itself: :func:`~edgepipe.graph.spec.on_loop`).

Declaring checks what it can at once (a duplicate id, an unknown policy) and raises
:class:`GraphError` naming the ``file:line`` of the call. :meth:`Pipeline.validate` checks the
rest (dangling inputs, cycles, item types) and returns the :class:`Graph` the runtime runs.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgepipe.core.channel import Policy
from edgepipe.core.errors import GraphError
from edgepipe.core.headroom import HEADROOM
from edgepipe.graph.check import Graph, validate
from edgepipe.graph.spec import (
    ErrorPolicy,
    Input,
    LaneSpec,
    NodeKind,
    NodeRef,
    NodeSpec,
    OnError,
    Priority,
    declared_on_loop,
    default_priority,
)
from edgepipe.graph.types import declared_types, perishable

__all__ = [
    "ErrorPolicy",
    "Graph",
    "Input",
    "InputsArg",
    "LaneSpec",
    "NodeKind",
    "NodeRef",
    "NodeSpec",
    "OnError",
    "Pipeline",
    "Priority",
]

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _caller_where() -> str | None:
    """``file:line`` of the first frame outside the edgepipe package (the pipeline file)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


OneInput = NodeRef | str | Input | tuple[Any, ...]
InputsArg = NodeRef | str | Input | Sequence[OneInput] | Mapping[str, OneInput]
"""A node, a list of nodes (one lane each) or ``{lane name: node}``; a node may be given with
options of its lane as :class:`Input` or ``(node, policy[, queue_size])``."""


@dataclass(frozen=True, slots=True)
class _LaneDefaults:
    """What a node's declaration gives every lane that does not set its own (None: nothing)."""

    policy: Policy | None
    size: int | None
    max_age_s: float | None


def _live_frames(producer: NodeSpec) -> bool:
    """Whether a node's items are frames of a live source (its lanes' defaults: latest, 1)."""
    live = getattr(producer.target, "live", False) is True
    return producer.kind is NodeKind.SOURCE and live and perishable(producer.out_type)


def _check_age(value: float | None, what: str) -> None:
    if value is not None and (isinstance(value, bool) or not (value > 0 and math.isfinite(value))):
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")


class Pipeline:
    """A graph of nodes joined by bounded channels. Build it, then run it."""

    def __init__(self, name: str = "pipeline", *, headroom: float = HEADROOM) -> None:
        """``headroom``: the share of this process's cores the scheduler keeps free (0.3: it
        slows low-priority work to stay at 70%); 0 runs ungoverned."""
        if isinstance(headroom, bool) or not (0 <= headroom < 1):
            raise GraphError(f"pipeline '{name}': headroom must be in [0, 1), got {headroom!r}")
        self.name = name
        self.headroom = float(headroom)
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
        on_loop: bool | None = None,
        timeout_s: float | None = None,
        out_type: Any = None,
        priority: Priority | str | None = None,
    ) -> NodeRef:
        """Declare a node that produces items: an async generator (function), an iterable, or a
        function returning one. Live sources restart by default."""
        return self._add(
            node_id, NodeKind.SOURCE, target, (), None, None, on_error, resource, on_loop,
            timeout_s, None, out_type, priority, None,
        )  # fmt: skip

    def stage(
        self,
        node_id: str,
        target: Any,
        *,
        inputs: InputsArg,
        queue_size: int | None = None,
        policy: Policy | str | None = None,
        on_error: ErrorPolicy | OnError | str = OnError.SKIP,
        resource: str = "cpu",
        on_loop: bool | None = None,
        timeout_s: float | None = None,
        in_type: Any = None,
        out_type: Any = None,
        priority: Priority | str | None = None,
        max_age_s: float | None = None,
        instances: int | str | None = None,
    ) -> NodeRef:
        """Declare a node that turns each input item into zero or one output item (return None
        for none), or an async generator function that maps the whole input stream.

        ``queue_size`` and ``policy``: the defaults of its input lanes (none given: ``latest``
        and 1 for a live source's frames, ``block`` and 8 otherwise; see the module's
        documentation). ``on_loop``: run synchronous code on the event loop (cheap code that
        never blocks) instead of a thread; None: what the code declares
        (:func:`~edgepipe.graph.spec.on_loop`), else a thread. ``priority`` (``low``,
        ``normal``, ``high``; default: what the code declares, else normal) orders what the
        governor slows first. ``max_age_s`` skips an item of a lossy
        (``latest``/``drop_new``) lane that is older than that when the node would start on it.
        ``instances``: calls of synchronous code run at once, each on a thread, results in each
        input's order (``"auto"``: the CPU budget's units; default: what the code declares,
        else 1; see :mod:`edgepipe.runtime.inflight.steps`)."""
        return self._add(
            node_id, NodeKind.STAGE, target, inputs, queue_size, policy, on_error, resource,
            on_loop, timeout_s, in_type, out_type, priority, max_age_s, instances,
        )  # fmt: skip

    def sink(
        self,
        node_id: str,
        target: Any,
        *,
        inputs: InputsArg,
        queue_size: int | None = None,
        policy: Policy | str | None = None,
        on_error: ErrorPolicy | OnError | str = OnError.SKIP,
        resource: str = "cpu",
        on_loop: bool | None = None,
        timeout_s: float | None = None,
        in_type: Any = None,
        priority: Priority | str | None = None,
        max_age_s: float | None = None,
        instances: int | str | None = None,
    ) -> NodeRef:
        """Declare a node that consumes items and emits nothing (options as for :meth:`stage`)."""
        return self._add(
            node_id, NodeKind.SINK, target, inputs, queue_size, policy, on_error, resource,
            on_loop, timeout_s, in_type, None, priority, max_age_s, instances,
        )  # fmt: skip

    def _add(
        self,
        node_id: str,
        kind: NodeKind,
        target: Any,
        inputs: InputsArg,
        queue_size: int | None,
        policy: Policy | str | None,
        on_error: ErrorPolicy | OnError | str,
        resource: str,
        on_loop: bool | None,
        timeout_s: float | None,
        in_type: Any,
        out_type: Any,
        priority: Priority | str | None,
        max_age_s: float | None,
        instances: int | str | None = None,
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
            parsed_policy = None if policy is None else Policy.parse(policy)
            parsed_on_error = ErrorPolicy.parse(on_error)
            parsed_priority = default_priority(kind, target) if priority is None else Priority.parse(priority)
            _check_age(max_age_s, "max_age_s")
        except ValueError as exc:
            raise GraphError(str(exc), node_id=node_id, where=where) from None
        if queue_size is not None and (isinstance(queue_size, bool) or not isinstance(queue_size, int)
                                       or queue_size < 1):  # fmt: skip
            raise GraphError(f"queue_size must be at least 1, got {queue_size!r}",
                             node_id=node_id, where=where)  # fmt: skip
        if timeout_s is not None and not (timeout_s > 0 and math.isfinite(timeout_s)):
            raise GraphError(
                f"timeout_s must be a positive number of seconds, got {timeout_s}",
                node_id=node_id,
                where=where,
            )
        if (
            instances is not None
            and instances != "auto"
            and (isinstance(instances, bool) or not isinstance(instances, int) or instances < 1)
        ):
            raise GraphError(f"instances must be a count of at least 1 or 'auto', got {instances!r}",
                             node_id=node_id, where=where)  # fmt: skip
        if isinstance(instances, int) and instances > 1 and parsed_on_error.action is OnError.RESTART:
            raise GraphError(
                f"instances={instances} with on_error='restart': restarting cycles the node's hooks "
                "under its other calls in flight; use on_error='skip' (the default) or 'stop'",
                node_id=node_id, where=where,
            )  # fmt: skip
        declared_in, declared_out = declared_types(target, kind.value)
        lanes = (
            ()
            if kind is NodeKind.SOURCE
            else self._lanes(inputs, _LaneDefaults(parsed_policy, queue_size, max_age_s), node_id, where)
        )
        spec = NodeSpec(
            node_id=node_id,
            kind=kind,
            target=target,
            lanes=lanes,
            queue_size=queue_size,
            policy=parsed_policy,
            on_error=parsed_on_error,
            resource=resource,
            on_loop=declared_on_loop(target) if on_loop is None else on_loop,
            timeout_s=timeout_s,
            in_type=in_type if in_type is not None else declared_in,
            out_type=out_type if out_type is not None else declared_out,
            where=where,
            priority=parsed_priority,
            instances=instances,
        )
        self._nodes[node_id] = spec
        return NodeRef(self, node_id)

    def _lanes(
        self, inputs: InputsArg, defaults: _LaneDefaults, node_id: str, where: str | None
    ) -> tuple[LaneSpec, ...]:
        named: list[tuple[str | None, Any]]
        if isinstance(inputs, Mapping):
            named = [(name, value) for name, value in inputs.items()]
            for name, _ in named:
                if not isinstance(name, str) or not name:
                    raise GraphError(f"lane names must be non-empty strings, got {name!r}", node_id=node_id,
                                     where=where)  # fmt: skip
        elif isinstance(inputs, NodeRef | str | Input):
            named = [(None, inputs)]
        elif isinstance(inputs, Sequence):
            named = [(None, value) for value in inputs]
        else:
            raise GraphError(
                f"inputs must be a node, a list of nodes or a dict of lanes, got {type(inputs).__name__}",
                node_id=node_id,
                where=where,
            )
        lanes = [self._lane(name, value, defaults, node_id, where) for name, value in named]
        sources = [lane.source for lane in lanes]
        if len(set(sources)) != len(sources):
            raise GraphError(f"an input is listed twice: {sources}", node_id=node_id, where=where)
        return tuple(lanes)

    def _lane(
        self, name: str | None, value: Any, defaults: _LaneDefaults, node_id: str, where: str | None
    ) -> LaneSpec:
        if isinstance(value, tuple) and not isinstance(value, NodeRef):
            if not 1 <= len(value) <= 3:
                raise GraphError(
                    f"an input tuple is (node, policy) or (node, policy, queue_size), got {value!r}",
                    node_id=node_id,
                    where=where,
                )
            value = Input(*value)
        lane = value if isinstance(value, Input) else Input(value)
        ref = lane.node
        if isinstance(ref, NodeRef):
            if ref.pipeline is not self:
                raise GraphError(f"input '{ref.node_id}' belongs to another Pipeline", node_id=node_id,
                                 where=where)  # fmt: skip
            source = ref.node_id
        elif isinstance(ref, str):
            source = ref
        else:
            raise GraphError(
                f"inputs must be node refs or node ids, got {type(ref).__name__}",
                node_id=node_id,
                where=where,
            )
        name = name or source
        producer = self._nodes.get(source)  # declared later (named by its id): not known as live
        live = producer is not None and _live_frames(producer)
        try:
            if lane.policy is not None:
                lane_policy = Policy.parse(lane.policy)
            elif defaults.policy is not None:
                lane_policy = defaults.policy
            else:
                lane_policy = Policy.LATEST if live else Policy.BLOCK
            _check_age(lane.max_age_s, f"lane '{name}': max_age_s")
        except ValueError as exc:
            raise GraphError(f"lane '{name}': {exc}", node_id=node_id, where=where) from None
        max_age_s = lane.max_age_s
        if max_age_s is not None and lane_policy is Policy.BLOCK:
            raise GraphError(
                f"lane '{name}': max_age_s is for lossy lanes (latest, drop_new); a block lane is lossless",
                node_id=node_id, where=where,
            )  # fmt: skip
        if max_age_s is None and lane_policy is not Policy.BLOCK:
            max_age_s = defaults.max_age_s
        lane_size = lane.queue_size if lane.queue_size is not None else defaults.size
        if lane_size is None:
            lane_size = 1 if live and lane_policy is Policy.LATEST else 8
        if isinstance(lane_size, bool) or not isinstance(lane_size, int) or lane_size < 1:
            raise GraphError(f"lane '{name}': queue_size must be an integer of at least 1, got {lane_size!r}",
                             node_id=node_id, where=where)  # fmt: skip
        return LaneSpec(name=name, source=source, policy=lane_policy, size=lane_size, max_age_s=max_age_s,
                        live_frames=live)  # fmt: skip

    # -- validation ---------------------------------------------------------------------------

    def validate(self) -> Graph:
        """Check the whole graph; raise :class:`GraphError` on the first problem found."""
        return validate(self.name, self._nodes, self.headroom)
