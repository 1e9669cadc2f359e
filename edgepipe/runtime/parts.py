"""What a node's loops work with: the seam between :class:`~edgepipe.runtime.node.NodeRunner`
(which owns a node's life) and the loops that move its items (:mod:`~edgepipe.runtime.pump`,
:mod:`~edgepipe.runtime.inflight.steps`, :mod:`~edgepipe.runtime.batched`), so that neither reaches into
the other's internals."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from edgepipe.core.context import NodeContext
from edgepipe.graph.spec import NodeSpec
from edgepipe.runtime.circuit import Circuit
from edgepipe.runtime.emit import Outputs
from edgepipe.runtime.inbox import Inbox
from edgepipe.runtime.metrics import NodeMetrics


class NodeParts(Protocol):
    """A running node as its loops see it (read-only: the runner owns these)."""

    @property
    def node_id(self) -> str: ...

    @property
    def spec(self) -> NodeSpec: ...

    @property
    def inbox(self) -> Inbox | None:
        """None for sources."""

    @property
    def outputs(self) -> Outputs: ...

    @property
    def circuit(self) -> Circuit: ...

    @property
    def metrics(self) -> NodeMetrics: ...

    @property
    def context(self) -> NodeContext: ...

    @property
    def call_thread(self) -> Callable[..., Awaitable[Any]]:
        """``await call_thread(fn, item, timeout_s, lane=None)``: ``fn(item)`` (or ``fn(item,
        lane)``) on the node's executor, under the deadline."""
