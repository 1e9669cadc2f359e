"""What a node's own code can know about where it runs: :func:`current_node`.

The runtime sets it in each node's task, so async code of a node (its ``start()``, its async
generator, its ``process()``) can read its id, how many consumers it feeds, report gauges that
show in ``--stats`` and metrics, and write events to the results.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol


class SourceState(Protocol):
    """What a source tells the nodes downstream of it (:class:`edgepipe.media.status.SourceStatus`
    is one): its state and why, read together. It may say more (``reconnects``,
    ``decoder_used``): readers ask with ``getattr``."""

    @property
    def state_info(self) -> tuple[str, str]:
        """(state, reason): ``connecting``, ``live``, ``stalled``, ``reconnecting``, ``ended``."""
        ...


@dataclass
class CallLimit:
    """How many calls of a node's code may run at once: its ``instances``, and how many of them
    the governor lets it use now (it sheds a second call under CPU pressure, and gives it back).
    Read by the runtime before each call it starts; set by a knob from any thread."""

    instances: int = 1
    allowed: int = 1
    """``1..instances``: calls in flight allowed now."""
    free: int = 1
    """Calls that could start now, as the runtime prepares its items (0: those allowed are
    under way). A node that says it ``defers_calls`` (a detector keeping up with live cameras)
    carries a frame rather than ask for a call while it is 0, so that no frame waits behind a
    call, and the runtime goes on preparing its items meanwhile."""

    ready: Callable[[], bool] | None = None
    """Whether one more call would start at once beside those under way (the node's code may
    say: a detector asks the CPU budget's gate, which paces its second call); None: whenever
    one is allowed. The runtime neither prepares nor starts a second call before it would: a
    frame waits, prepared, for no unit it will not get."""

    def shed(self, count: int) -> None:
        """Allow ``instances - count`` calls (at least one)."""
        self.allowed = max(1, self.instances - max(0, count))

    def another(self) -> bool:
        """Whether one more call beside those under way would start at once (:attr:`ready`)."""
        ready = self.ready
        return ready is None or ready()


@dataclass
class NodeContext:
    """The running node, as seen from its own code."""

    node_id: str
    consumers: int
    """How many nodes take this node's output (each gets every item)."""
    emit_event: Callable[[str, Any], Awaitable[None]]
    """``await emit_event(kind, data)`` writes a result message on behalf of this node."""
    gauges: dict[str, Any] = field(default_factory=dict)
    """Name -> current value (a source's state, frames dropped …), shown by ``--stats``."""
    run_blocking: Callable[..., Awaitable[Any]] | None = None
    """``await run_blocking(fn, *args)`` runs blocking set-up work (loading a model) on the
    node's hook threads, off the event loop, with the context of the node."""
    consumer_holds: tuple[int, ...] = ()
    """How many of this node's items each consumer can hold at once: its lane's size plus what
    it has in hand (one, two when it prepares the next item while processing, a batch). A pool
    of items feeding them needs their sum, plus the one being made."""
    lane: str = ""
    """In a stream stage, the lane the item just received came from."""
    priority: int = 1
    """The node's :class:`~edgepipe.graph.spec.Priority` (0 low, 1 normal, 2 high): heavy calls
    it makes (model runs) are admitted to the CPU budget with it."""
    stop_timeout_s: float = 5.0
    """How long its ``stop()`` hook may take before the runtime abandons it."""
    live_input: bool = False
    """Every input lane keeps only the newest items (``latest``): live input, which does not
    wait for this node (a detector then keeps up by its interval, not by holding cameras back)."""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the run is stopping (SIGINT, SIGTERM, ``--duration``): the sources are closed
    and what is queued drains, within the drain deadline. A node that starts long work of its
    own (a description by a language model) starts no more and cuts short what it has under
    way; items already queued are still processed."""
    pipeline: str = ""
    """The name of the running pipeline (``Pipeline(name)``): MQTT topics and client ids use it."""
    calls: CallLimit = field(default_factory=CallLimit)
    """How many calls of its code the node runs at once (``calls.instances``: ``instances``, with
    ``"auto"`` resolved by the CPU budget; a model node sizes its buffers and threads by it at
    ``start()``), and how many of them it may run now (``calls.allowed``: a governor's knob may
    shed some)."""
    sources: Mapping[str, SourceState] = field(default_factory=lambda: MappingProxyType({}))
    """The sources upstream of this node (its inputs' inputs, all the way up), by node id, in
    the graph's order: each one's state as it changes (the source's ``status``, kept across its
    restarts). Sources whose code has no ``status`` are left out; a source has none upstream."""


_current: contextvars.ContextVar[NodeContext] = contextvars.ContextVar("edgepipe_node")


def current_node() -> NodeContext:
    """The node whose task is running. Raises ``RuntimeError`` outside a running pipeline."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("current_node() is only available inside a running node") from None


def set_current(ctx: NodeContext) -> None:
    _current.set(ctx)
