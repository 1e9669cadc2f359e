"""The knobs the governor turns (see :mod:`~edgepipe.sched.governor`): one rate each.

- :class:`PaceKnob`: the share of time a caller's heavy calls may take (token decode).
- :class:`InstancesKnob`: the share of the spare units' time a node's second call in flight
  may take (a detector with ``instances`` > 1), down to none: one call in flight.
- :class:`EveryKnob`: how many frames per source a detector lets pass between model runs
  (the tracker carries the boxes between them).
- :class:`ThinKnob`: one frame kept in N on a lossy lane (``latest``/``drop_new``); lossless
  (``block``) lanes carry results and are never thinned.

The tables below were tuned with ``python -m scripts.bench.headroom`` on 2 cores, for rungs of a few
points of the CPU each, about the governor's window (:data:`~edgepipe.sched.governor.WINDOW`), so
that it settles next to its target. What a rung costs depends on the machine only where a
table paces a fixed number of units (a unit: one core-thread of the budget): token decode and a
detector's spare units. On more cores such a step is a smaller share of the CPU, so
:func:`rungs` merges steps up to the window there. A detector's rate is a share of its own
calls, which are sized from the budget's units, so its tables cost about the same on any core
count.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Protocol

from edgepipe.core.channel import Channel, Policy
from edgepipe.core.context import CallLimit
from edgepipe.sched.budget import cpu_budget
from edgepipe.sched.gate import Ticket
from edgepipe.sched.governor import WINDOW
from edgepipe.sched.hooks import KeepsUp

DUTIES = (1.0, 0.6, 0.4, 0.25, 0.15, 0.1, 0.06)
"""Token decode's share of the time, from unpaced to the floor (it slows, it never stops). Its
calls run one at a time: a step paces one unit (:func:`rungs`)."""

EVERY = (1, 1.05, 1.1, 1.15, 1.2, 1.3, 1.4, 1.5, 1.6, 1.75, 1.9, 2, 2.15, 2.3, 2.45, 2.6, 2.8, 3, 3.2, 3.4,
         3.7, 4, 4.5, 5, 6, 8, 12, 16, 24, 32)  # fmt: skip
"""Frames per model run, per source (times the detector's own ``every``, or what keeping up
with its cameras needs). Fine steps up to 4, each cutting the model's rate by 4-9%: about 2
points of the CPU (its calls fill the budget's units, on any core count), within the governor's
3-point window (:data:`~edgepipe.sched.governor.WINDOW`), so it can settle next to its target.
With steps of 15% (1, 1.15, 1.3, ...) a run settled a whole step under it, and where varied
from run to run (model runs/s 18.5 to 21.8 in three runs of ``python -m scripts.bench.headroom``);
with 2, 2.5, 3, 4, a detector keeping up with 4 or 8 cameras on 2 cores, that the budget held
to about half its model's rate, swung between the rungs about it by a quarter of its runs and 7
points of CPU."""

PINNED_DUTIES = (1.0, 0.93, 0.87, 0.81, 0.75, 0.7, 0.65, 0.6, 0.5)
"""A pinned detector's share of the time (``Detector(pin_every=True)``), rung by rung: each cuts
its rate by about 7% (a few points of the CPU, inside the governor's window, on any core count
as :data:`EVERY`'s), then its lane is thinned."""

THIN = (1, 2, 3, 4, 6, 8)
"""One frame kept in N."""

SPARE_DUTIES = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1, 0.05, 0.0)
"""A second call's share of the spare units, from free to shed. A budget has one spare unit at
most (its fraction past its whole units): on 2 cores (1.4 of them: one main unit and a spare
one) a step of 0.05 is about a twentieth of a core while the second call would run back to
back: 2-3 points of the CPU, inside the governor's window, so it settles next to its target.
With steps of 0.15 (a tenth of a core and more) face_privacy on a file swung between two rungs,
59% and 73% of the cores, a model run's worth apart. On more cores the steps are merged
(:func:`rungs`)."""


def rungs(
    duties: Sequence[float], units: float, cores: float | None = None, window: float = WINDOW
) -> tuple[float, ...]:
    """This machine's rungs of a table of ``duties`` (shares of the time, from unpaced down to
    the floor) that paces ``units`` heavy calls: a step from duty ``a`` to ``b`` costs ``(a -
    b) x units / cores`` of the usable cores (``cores``: the budget's of the run the caller works
    for). A duty is skipped while going straight past it to the next costs no more than the
    governor's ``window``: on 8 cores a step of 0.05 of one unit is 0.6 points, and a climb
    across four times the rungs, each waiting out the governor's settle time, would shed the
    same CPU four times slower. The first and last duties are always kept, and on the 2 cores
    the tables were tuned on every step is kept (two of the finest cost 4.5 points or more)."""
    usable = cpu_budget().cores.usable if cores is None else cores
    kept = [duties[0]]
    for duty, after in itertools.pairwise(duties[1:]):
        if (kept[-1] - after) * units / usable > window:
            kept.append(duty)
    if len(duties) > 1:
        kept.append(duties[-1])
    return tuple(kept)


class PaceKnob:
    """Paces the heavy calls of one or more tickets (a language model's session)."""

    kind = "pace"
    pinned = False

    def __init__(
        self, node_id: str, priority: int, tickets: Sequence[Ticket], duties: Sequence[float] | None = None
    ) -> None:
        """``duties``: the rungs (default: :data:`DUTIES`, as :func:`rungs` of this machine for
        the tickets' calls, one unit each)."""
        self.node_id = node_id
        self.priority = priority
        self.tickets = list(tickets)
        self.duties = rungs(DUTIES, max(1, len(self.tickets))) if duties is None else tuple(duties)
        self.levels = len(self.duties)
        self.level = 0

    def set(self, level: int) -> None:
        self.level = level
        for ticket in self.tickets:
            ticket.duty = self.duties[level]

    def describe(self) -> str:
        duty = self.duties[self.level]
        return "unpaced" if duty >= 1 else f"paced to {duty:.0%} of the time"


class InstancesKnob:
    """Sheds a node's calls in flight beyond its main units (its ``instances`` > 1): first paces
    its calls in the spare units beside its own (:data:`SPARE_DUTIES`), then, at the last rung,
    allows one call fewer (its :class:`~edgepipe.core.context.CallLimit`), so that a prepared
    frame does not wait on a thread for a unit it will not get. Restoring it is as quick (one
    rung a step)."""

    kind = "instances"
    pinned = False

    def __init__(
        self, node_id: str, priority: int, tickets: Sequence[Ticket], calls: CallLimit,
        duties: Sequence[float] | None = None,
    ) -> None:  # fmt: skip
        """``duties``: the rungs (default: :data:`SPARE_DUTIES`, as :func:`rungs` of this machine
        for the spare unit)."""
        self.node_id = node_id
        self.priority = priority
        self.tickets = list(tickets)
        self.calls = calls
        self.duties = rungs(SPARE_DUTIES, 1) if duties is None else tuple(duties)
        self.levels = len(self.duties)
        self.level = 0
        self.set(0)

    def set(self, level: int) -> None:
        self.level = level
        duty = self.duties[level]
        for ticket in self.tickets:
            ticket.spare_duty = duty
        self.calls.shed(1 if duty <= 0 else 0)

    def describe(self) -> str:
        duty = self.duties[self.level]
        allowed = self.calls.allowed
        calls = f"{allowed} call{'s' if allowed != 1 else ''} in flight"
        if duty <= 0:
            return f"{calls} (one shed)"
        if duty >= 1:
            return calls
        return f"{calls}, the spare units {duty:.0%} of the time"


class Interval(Protocol):
    """What an :class:`EveryKnob` turns: a node's current frames-per-run (a Detector)."""

    every_now: float


class EveryKnob:
    """Raises a detector's interval above its own ``every`` (never below it)."""

    kind = "every"
    pinned = False

    def __init__(
        self, node_id: str, priority: int, target: Interval, base: int, steps: Sequence[float] = EVERY
    ) -> None:
        self.node_id = node_id
        self.priority = priority
        self.target = target
        self.base = base
        self.steps: tuple[float, ...] = tuple(base * s for s in steps)
        self.levels = len(self.steps)
        self.level = 0
        target.every_now = base  # a run starts at full rate, whatever an earlier run left

    def set(self, level: int) -> None:
        self.level = level
        self.target.every_now = self.steps[level]

    def describe(self) -> str:
        # A detector that keeps up with its cameras scales what that needs by the rung's factor.
        every = self.steps[self.level]
        keep = float(self.target.keep_up_interval) if isinstance(self.target, KeepsUp) else 1.0
        if keep > self.base:
            return f"model on 1 frame in {keep * every / self.base:.3g} per source (keeping up: {keep:.3g})"
        return f"model on 1 frame in {every:.3g} per source"


class ThinKnob:
    """Keeps one item in N on a lossy lane."""

    kind = "thin"
    pinned = False

    def __init__(
        self, node_id: str, priority: int, channel: Channel[Any], steps: Sequence[int] = THIN
    ) -> None:
        if channel.policy is Policy.BLOCK:
            raise ValueError(f"lane '{channel.name}' of '{node_id}' is lossless (block): it is never thinned")
        self.node_id = node_id
        self.priority = priority
        self.channel = channel
        self.steps = tuple(steps)
        self.levels = len(self.steps)
        self.level = 0

    def set(self, level: int) -> None:
        self.level = level
        self.channel.thin = self.steps[level]

    def describe(self) -> str:
        n = self.steps[self.level]
        lane = f"lane '{self.channel.name}'"
        return f"{lane} takes every frame" if n == 1 else f"{lane} keeps 1 frame in {n}"
