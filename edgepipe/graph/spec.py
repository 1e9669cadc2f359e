"""What a pipeline declares, as immutable values: nodes, their input lanes, error policies.

:class:`~edgepipe.graph.pipeline.Pipeline` builds these; :mod:`edgepipe.graph.check` checks them;
the runtime runs them. Nothing here runs anything.
"""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

from edgepipe.core.channel import Policy


class NodeKind(enum.StrEnum):
    SOURCE = "source"
    STAGE = "stage"
    SINK = "sink"


class Priority(enum.IntEnum):
    """How much a node's work matters when the CPU budget is short: the governor slows lower
    ones first, and heavy calls of a higher one get a larger share of the budget."""

    LOW = 0
    """Best effort: a language model describing the scene."""
    NORMAL = 1
    """Analysis: detectors, trackers."""
    HIGH = 2
    """What must not lose frames: sources, recorders, what viewers watch."""

    @classmethod
    def parse(cls, value: Priority | str | int) -> Priority:
        """A priority, its name (``low``, ``normal``, ``high``) or its number."""
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                raise ValueError(f"unknown priority {value!r}; use low, normal or high") from None
        if isinstance(value, bool):
            raise ValueError(f"unknown priority {value!r}; use low, normal or high")
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown priority {value!r}; use low, normal or high") from None


def default_priority(kind: NodeKind, target: Any) -> Priority:
    """A node's priority when its declaration gives none: what its code declares
    (``priority = "low"`` on a class), else high for sources and normal for the rest."""
    declared = getattr(target, "priority", None)
    if isinstance(declared, Priority | str) and not isinstance(declared, bool):
        try:
            return Priority.parse(declared)
        except ValueError:
            pass
    return Priority.HIGH if kind is NodeKind.SOURCE else Priority.NORMAL


T = TypeVar("T")


def on_loop(code: T) -> T:
    """Declares that a node's synchronous code runs on the event loop, not on a thread: cheap
    code that never blocks and must see the loop's state at once (a sink handing results to
    viewers, a log of changes). Put it on a function, a method (``@on_loop def results(self,
    item)``) or a class; ``on_loop = True`` as a class attribute says the same. A declaration's
    ``on_loop=`` argument overrides it."""
    code.on_loop = True  # type: ignore[attr-defined]
    return code


def declared_on_loop(target: Any) -> bool | None:
    """What a node's code declares with :func:`on_loop` (on itself, on the function inside a
    ``functools.partial``, or on its ``process`` method); None when it declares nothing."""
    layers = [target]
    while isinstance(layers[-1], functools.partial):
        layers.append(layers[-1].func)
    for code in (*layers, getattr(target, "process", None)):
        declared = getattr(code, "on_loop", None)
        if isinstance(declared, bool):
            return declared
    return None


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
    """How a node reacts to an exception from its own code.

    Stages and sinks have a circuit breaker: after ``open_after`` failures in a row the circuit
    *opens* and items are skipped (counted) without calling the code, so a broken node costs
    nothing and the rest of the graph keeps its rate; after ``cooldown_s`` it *half-opens* and
    lets one item through: a success closes it, a failure opens it again for twice as long (up
    to ``cooldown_max_s``). ``stop`` has no circuit: the first failure stops the pipeline.
    Sources keep reconnecting with backoff instead (a camera comes back).
    """

    action: OnError = OnError.SKIP
    """``restart``, ``skip`` or ``stop``."""
    open_after: int = 5
    """Stages and sinks: failures in a row (no success between) that open the circuit."""
    cooldown_s: float = 1.0
    """How long an opened circuit skips items before it lets one through."""
    cooldown_max_s: float = 30.0
    """Cap of the cool-down, which doubles each time a trial item fails."""
    max_consecutive: int = 50
    """Sources, and ``start()`` under ``restart``: failures in a row (no success between) after
    which the pipeline stops: what fails on every open is broken, not unlucky."""
    backoff_initial_s: float = 0.1
    """First wait before a restart (or a source's reopen); doubled on each one in a row."""
    backoff_max_s: float = 5.0
    """Cap of the restart wait."""

    def __post_init__(self) -> None:
        for name in ("open_after", "max_consecutive"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("cooldown_s", "cooldown_max_s", "backoff_initial_s", "backoff_max_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value}")

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
class NodeRef:
    """What declaring a node returns; pass it as another node's input."""

    pipeline: Any
    """The :class:`~edgepipe.graph.pipeline.Pipeline` that declared the node."""
    node_id: str


@dataclass(frozen=True, slots=True)
class Input:
    """One input of a node with options of its own lane (omitted ones: the node's)::

        p.stage("annotate", Annotate(), inputs={
            "frames": Input(camera, policy="latest", queue_size=1),
            "faces": faces,                      # the node's policy and queue_size
        })

    A tuple ``(node, policy)`` or ``(node, policy, queue_size)`` means the same.
    """

    node: NodeRef | str
    """The producer: what declaring it returned, or its id."""
    policy: Policy | str | None = None
    """``block``, ``latest`` or ``drop_new``; None: the node's ``policy`` (when the node sets
    none either: ``latest`` for frames of a live source, else ``block``)."""
    queue_size: int | None = None
    """The lane's capacity in items; None: the node's ``queue_size`` (when the node sets none
    either: 1 for a ``latest`` lane of a live source's frames, else 8)."""
    max_age_s: float | None = None
    """Skip (and count) an item older than this when the node would start on it (live video
    never queues into the past); None: the node's ``max_age_s``. Not on ``block`` lanes."""


@dataclass(frozen=True, slots=True)
class LaneSpec:
    """One input edge of a node as declared: a lane of its inbox."""

    name: str
    """What the node calls this input (the producer's id unless named); handlers that take a
    ``lane`` argument receive it with each item."""
    source: str
    """The producer's node id."""
    policy: Policy
    size: int
    """Its capacity in items (the declaration's ``queue_size``)."""
    max_age_s: float | None = None
    """Items older than this (seconds since they were decoded) are skipped when taken."""
    live_frames: bool = False
    """Its producer is a live source of frames (a camera): its policy and size default to
    ``latest`` and 1 (the newest frame, never a queue of old ones)."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node as declared. Immutable; the runtime builds its running state from it."""

    node_id: str
    """Unique in the pipeline; appears in every log line, metric and error about the node."""
    kind: NodeKind
    target: Any
    """The user's code: function, async function, async generator function, iterable, or an
    object with ``process()`` (stages, sinks) or ``__aiter__``/``__iter__`` (sources)."""
    lanes: tuple[LaneSpec, ...] = ()
    """The node's inputs, one lane of its inbox each, in declaration order."""
    queue_size: int | None = None
    """Default capacity of each input lane, as declared (None: each lane's own default)."""
    policy: Policy | None = None
    """Default policy of each input lane, as declared: ``block``, ``latest`` or ``drop_new``
    (None: each lane's own default)."""
    on_error: ErrorPolicy = field(default_factory=ErrorPolicy)
    resource: str = "cpu"
    """Executor that runs the node's blocking (synchronous) code."""
    on_loop: bool | None = None
    """Whether synchronous code runs on the event loop (True: cheap code that never blocks)
    rather than on a thread of ``resource`` (False). None: on a thread for functions and
    iterators, on the loop for in-memory sequences. Async code always runs on the loop."""
    timeout_s: float | None = None
    """Deadline of one call of the node's code; a late call is abandoned and counted as an error."""
    in_type: Any = None
    out_type: Any = None
    where: str | None = None
    """``file:line`` that declared the node."""
    priority: Priority = Priority.NORMAL
    """What the governor slows last (see :class:`Priority`)."""
    instances: int | str | None = None
    """Calls of the node's code it may run at once (``process()`` on that many threads, results
    in each lane's order; :mod:`edgepipe.runtime.inflight.steps`), or ``"auto"``: as many as the run's
    CPU budget has units for (one when ungoverned). None: what its code declares (an
    ``instances`` attribute), else 1."""

    @property
    def inputs(self) -> tuple[str, ...]:
        """Ids of the nodes whose output this node consumes, one per lane."""
        return tuple(lane.source for lane in self.lanes)

    @property
    def label(self) -> str:
        """The user's code, as a person would name it."""
        target = self.target
        name = getattr(target, "__qualname__", None) or type(target).__qualname__
        return str(name)
