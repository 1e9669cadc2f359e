"""Who asks the CPU gate for heavy calls (:class:`Ticket`), where an admitted call runs
(:data:`MAIN` and the spare pools) and what it holds (:class:`Held`): the gate's vocabulary,
apart from its rules (:mod:`edgepipe.sched.gate`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from edgepipe.core.backoff import Backoff

MAIN = "main"
"""Where a call runs: the budget's main units."""
SPARE = "spare"
"""The spare units: low-priority token decode, or a short call while the main ones are held."""
LENT = "lent"
"""The spare units, lent to a caller's second call beside its own in the main units (paced by
its ``spare_duty``)."""
OVER = "over"
"""Past the budget: a short call beside a second call that holds the spare units."""

LENT_SLOWER = 1.3
"""A second call in the spare units that took longer than this times its caller's calls in the
main units ran mostly waiting for a core: the spare units' cores are the light ones
(:mod:`edgepipe.sched.affinity`), and where the decoders keep them busy a model run gets what
they leave (4 1080p decoders on a 2-core box: 2.5x its wall time). Its frame's result comes
that much later, and every result of its cameras waits as long (the presentation delay follows
the slowest calls), for little more throughput. So the next second call waits
:data:`LEND_RETRY_S`, twice as long after each slow one, up to :data:`LEND_RETRY_MAX_S`."""
LEND_RETRY_S = 4.0
LEND_RETRY_MAX_S = 64.0


@dataclass(frozen=True, slots=True)
class Held:
    """What one admitted call holds, from :meth:`Gate.enter` to :meth:`Gate.leave`."""

    t_start: float
    """When it started (the gate's clock)."""
    pool: str
    """Where it runs: :data:`MAIN`, :data:`SPARE`, :data:`LENT` or :data:`OVER`."""


class AdmissionTimeout(TimeoutError):
    """A heavy call waited longer than its deadline for the CPU budget."""


class AdmissionCancelled(Exception):
    """A heavy call's wait for the CPU budget (or its pace) ended because its ticket's
    ``cancel`` event was set: the call did not run."""


@dataclass(eq=False, slots=True, weakref_slot=True)
class Ticket:
    """One caller of heavy work (a model's session, an encoder) as the gate knows it."""

    owner: str
    """The node (or model) it works for: named in logs, the snapshot and errors."""
    kind: str = "model"
    """``detect``, ``lm``, ``encode`` or ``model``: what the snapshot groups busy time by."""
    priority: int = 1
    units: int = 1
    duty: float = 1.0
    """Share of the time it may run (set by the governor; 1: unpaced)."""
    calls: int = 0
    busy_s: float = 0.0
    waited_s: float = 0.0
    """Time spent waiting for the budget or for its pace, over all calls."""
    vtime: float = 0.0
    next_at: float = 0.0
    in_spare: int = 0
    """Calls of it running in the gate's spare units now."""
    in_main: int = 0
    """Calls of it running in the gate's main units now."""
    spare_duty: float = 1.0
    """Share of the spare units' time its calls may take beside one of its own in the main units
    (set by the governor's :class:`~edgepipe.sched.knobs.InstancesKnob`; 0: never)."""
    spare_next_at: float = 0.0
    main_wall_s: float = 0.0
    """Wall time of its calls in the main units, smoothed (0 before any)."""
    lend_backoff: Backoff = field(default_factory=lambda: Backoff(LEND_RETRY_S, LEND_RETRY_MAX_S))
    """How long its second calls wait after ones that ran too slowly (:data:`LENT_SLOWER`)."""
    short: bool = False
    """A short call (an encode): it may run in the spare units when the main ones are held
    (see the module docstring)."""
    cancel: threading.Event | None = None
    """Set: a wait of its calls at the gate ends with :class:`AdmissionCancelled` (call
    :meth:`Gate.wake` after setting it). A call that need not wait still runs: whoever sets it
    checks it between calls too."""

    def set_owner(self, owner: str, kind: str, priority: int) -> None:
        self.owner, self.kind, self.priority = owner, kind, priority

    def ran(self, pool: str, now: float, elapsed: float) -> None:
        """A call of ``elapsed`` seconds ended in ``pool``: the next second call's time (its
        ``spare_duty``, and :data:`LENT_SLOWER`)."""
        if pool is MAIN:
            wall = self.main_wall_s
            self.main_wall_s = elapsed if wall <= 0 else wall + 0.2 * (elapsed - wall)
            return
        if pool is not LENT:
            return
        duty = self.spare_duty
        self.spare_next_at = now + elapsed * (1 / duty - 1) if 0 < duty < 1 else 0.0
        if 0 < self.main_wall_s * LENT_SLOWER < elapsed:
            self.spare_next_at = max(self.spare_next_at, now + self.lend_backoff.next())
        else:
            self.lend_backoff.reset()
