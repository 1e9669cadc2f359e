"""What a node's loops work with: the seam between :class:`~edgepipe.core.node.NodeRunner`
(which owns a node's life) and the loops that move its items (:mod:`~edgepipe.core.pump`,
:mod:`~edgepipe.core.prepared`, :mod:`~edgepipe.core.batched`), so that neither reaches into
the other's internals."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from edgepipe.core.circuit import Circuit
from edgepipe.core.context import NodeContext
from edgepipe.core.emit import Outputs
from edgepipe.core.inbox import Inbox
from edgepipe.core.metrics import NodeMetrics
from edgepipe.core.spec import NodeSpec


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
