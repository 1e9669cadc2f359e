"""Admission of heavy calls (model runs, LM steps, encodes) to the CPU budget.

Sizing thread pools does not bound how many cores a process keeps busy: two one-thread ONNX
Runtime sessions called from two threads keep two cores busy. So every heavy call enters the
run's :class:`Gate` first, holding ``units`` of the budget (its session's intra-op threads)
while it runs:

- **Slots.** At most ``units`` of heavy work run at once (2 cores x 0.7 → one call at a time),
  instead of all of it fighting for the same cores. The budget's fraction past them is a
  *spare* unit (1.4 → one) for low-priority token decode, beside the main units and paced by
  the governor (so it never holds up a detection); where there is none, or the model's steps
  are wider than it, a token-decode step waits while a detection holds the budget, and runs in
  the gap after it. A caller with several calls in flight (a detector with ``instances`` > 1)
  may put a call in the spare units while one of its own holds the main ones: the budget's
  fraction becomes a second model run rather than idle time, paced by the governor through
  the ticket's ``spare_duty`` (down to 0: one call in flight); one that ran much slower than
  its calls in the main units (the spare units' cores busy decoding) makes the next wait
  (:data:`~edgepipe.sched.ticket.LENT_SLOWER`). A *short* call (an encode: a few
  milliseconds) takes whichever units are free, the main ones first, and is never held by such
  a second call (it runs beside it, a few milliseconds over the budget): a viewer's frame does
  not wait out a detection while the spare unit is idle or lent, and a detection does not wait
  for a recording's encode.
- **Fair shares by priority.** When several callers wait, the one with the least weighted
  run time goes first (stride scheduling: each call adds ``seconds x units / weight``, weights
  1 : 4 : 8 for low, normal, high). A detector (normal) and a language model (low) that both
  want the same units all the time get 80% and 20% of them: the model slows, it never starves.
- **Pacing.** The governor may give a caller a duty below 1: after a call of ``t`` seconds it
  may not start another for ``t x (1/duty - 1)``, so its share of the time is ``duty``. Its
  ``spare_duty`` paces the same way the calls it puts in the spare units beside its own.
- **Cancelling.** A ticket's ``cancel`` event, once set (a language model's request being
  cancelled as the run stops), ends its wait for the budget or its pace with
  :class:`AdmissionCancelled`; the setter calls :meth:`Gate.wake` so the waiter sees it at
  once. :meth:`Gate.unpace` lifts every pace (the runtime is stopping: what was held back goes
  now, so the drain is not spent waiting).

Without a budget (``units=None``: ungoverned) calls are never held; they are still counted,
and how long detection and token decode ran at the same time is measured either way.

Thread-safe; the waits happen on the caller's worker thread, never on the event loop.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from edgepipe.core import cputime
from edgepipe.core.scope import Slot
from edgepipe.sched import affinity
from edgepipe.sched.ticket import (
    LENT,
    MAIN,
    OVER,
    SPARE,
    AdmissionCancelled,
    AdmissionTimeout,
    Held,
    Ticket,
)

__all__ = [
    "WEIGHTS",
    "MAIN",
    "SPARE",
    "LENT",
    "OVER",
    "Held",
    "Ticket",
    "AdmissionTimeout",
    "AdmissionCancelled",
    "GateStats",
    "Gate",
    "GATE",
    "gate",
    "set_gate",
]

WEIGHTS = {0: 1.0, 1: 4.0, 2: 8.0}
"""Share weights by :class:`~edgepipe.graph.spec.Priority` (low, normal, high)."""


@dataclass(frozen=True, slots=True)
class GateStats:
    units: int | None
    busy_s: dict[str, float]
    """Heavy-call seconds by kind."""
    overlap_s: float
    """Seconds during which heavy calls of two different kinds ran at once."""
    detect_lm_overlap_s: float
    """Seconds during which a detection and a token-decode step ran at once."""
    waits: int
    waited_s: float


class Gate:
    """See the module docstring. ``units=None``: admit everything at once (ungoverned)."""

    def __init__(
        self, units: int | None, *, spare: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.units = units
        self.spare = spare if units is not None else 0
        """Units beyond ``units`` that only low-priority calls use (see :func:`spare_units`)."""
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._used = 0
        self._spare_used = 0
        self._lent_used = 0
        """Spare units held by second calls (a caller's own beside its call in the main ones)."""
        self._over_used = 0
        """Units short calls hold beyond the budget, beside second calls in the spare units."""
        self._waiting: list[Ticket] = []
        self._vclock = 0.0
        self._running: dict[str, int] = {}
        self._since = clock()
        self._overlap_s = 0.0
        self._detect_lm_s = 0.0
        self._busy: dict[str, float] = {}
        self._waits = 0
        self._waited_s = 0.0
        self._tickets: weakref.WeakSet[Ticket] = weakref.WeakSet()

    # -- admission ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def admit(self, ticket: Ticket, timeout_s: float | None = None) -> Iterator[None]:
        """Hold ``ticket.units`` of the budget for the ``with`` block. Raises
        :class:`AdmissionTimeout` after ``timeout_s`` of waiting."""
        held = self.enter(ticket, timeout_s)
        try:
            yield
        finally:
            self.leave(ticket, held)

    def enter(self, ticket: Ticket, timeout_s: float | None = None) -> Held:
        """Wait for the budget (and the ticket's pace); returns what the call holds, for
        :meth:`leave`. The calling thread is put on the heavy cores
        (:mod:`edgepipe.sched.affinity`), or on the light ones for a call in the spare units."""
        with self._cond:
            now = self._clock()
            self._tickets.add(ticket)
            pool = self._start_in(ticket, now, alone=True)
            if pool is None:
                now, pool = self._wait(ticket, now, timeout_s)
            spare = pool is not MAIN
            self._take(ticket, pool)
            self._account(now)
            self._running[ticket.kind] = self._running.get(ticket.kind, 0) + 1
            self._vclock = max(self._vclock, ticket.vtime)
        if spare:
            affinity.pin_light()
        else:
            affinity.pin_heavy()
        cputime.begin(cputime.heavy_key(ticket.owner, ticket.kind))  # the call's CPU is its kind's
        return Held(now, pool)

    def _take(self, ticket: Ticket, pool: str) -> None:
        units = ticket.units
        if pool is MAIN:
            self._used += units
            ticket.in_main += 1
            return
        ticket.in_spare += 1
        if pool is OVER:
            self._over_used += units
            return
        self._spare_used += units
        if pool is LENT:
            self._lent_used += units

    def _give_back(self, ticket: Ticket, pool: str, now: float, elapsed: float) -> None:
        ticket.ran(pool, now, elapsed)
        units = ticket.units
        if pool is MAIN:
            self._used -= units
            ticket.in_main -= 1
            return
        ticket.in_spare -= 1
        if pool is OVER:
            self._over_used -= units
            return
        self._spare_used -= units
        if pool is LENT:
            self._lent_used -= units

    def leave(self, ticket: Ticket, held: Held) -> None:
        cputime.end()
        with self._cond:
            now = self._clock()
            elapsed = max(0.0, now - held.t_start)
            self._account(now)
            self._running[ticket.kind] -= 1
            self._give_back(ticket, held.pool, now, elapsed)
            ticket.calls += 1
            ticket.busy_s += elapsed
            self._busy[ticket.kind] = self._busy.get(ticket.kind, 0.0) + elapsed
            ticket.vtime += elapsed * ticket.units / WEIGHTS.get(ticket.priority, 1.0)
            duty = ticket.duty
            ticket.next_at = now + elapsed * (1 / duty - 1) if 0 < duty < 1 else 0.0
            if self._waiting:
                self._cond.notify_all()

    def _wait(self, ticket: Ticket, now: float, timeout_s: float | None) -> tuple[float, str]:
        """Wait until ``ticket`` may start; (the time, where: :data:`MAIN`, :data:`SPARE`,
        :data:`LENT` or :data:`OVER`)."""
        t0 = now
        # The deadline bounds the wait for the budget, not the pace the governor asked for.
        deadline = max(now, ticket.next_at) + timeout_s if timeout_s is not None else float("inf")
        ticket.vtime = max(ticket.vtime, self._vclock)  # no credit banked while away
        self._waiting.append(ticket)
        self._waits += 1
        cancel = ticket.cancel
        try:
            while (pool := self._start_in(ticket, now, alone=False)) is None:
                if cancel is not None and cancel.is_set():
                    raise AdmissionCancelled(f"{ticket.owner}: cancelled while waiting for the CPU budget")
                if now >= deadline:
                    holders = ", ".join(sorted(k for k, n in self._running.items() if n)) or "pace"
                    raise AdmissionTimeout(
                        f"waited {(now - t0) * 1000:.0f} ms for the CPU budget (held by: {holders})"
                    )
                wake = min([deadline, *(t for t in (ticket.next_at, ticket.spare_next_at) if t > now)])
                self._cond.wait(timeout=max(0.0005, min(wake - now, 0.5)))
                now = self._clock()
        finally:
            self._waiting.remove(ticket)
            ticket.waited_s += now - t0
            self._waited_s += now - t0
            if self._waiting:  # those that deferred to this one may go now (or after it)
                self._cond.notify_all()
        return now, pool

    def would_admit(self, ticket: Ticket, *, beside: bool = False) -> bool:
        """Whether a call of ``ticket`` would start at once now, taking its turn among those
        waiting (nothing is taken: a caller that can put its work off, a detector, asks before
        it prepares a frame for a call that would only wait here). ``beside``: as another call
        beside one of its own in the main units (counted so even if that one has not entered
        yet: its thread may not have reached the gate)."""
        with self._cond:
            lend = beside and not ticket.in_main
            vtime = ticket.vtime
            if lend:
                ticket.in_main += 1
                self._used += ticket.units
            ticket.vtime = max(vtime, self._vclock)  # as a wait would start it
            try:
                return self._start_in(ticket, self._clock(), alone=False) is not None
            finally:
                ticket.vtime = vtime
                if lend:
                    ticket.in_main -= 1
                    self._used -= ticket.units

    def wake(self) -> None:
        """Waiters look again now (after a ticket's ``cancel`` was set: it ends its wait)."""
        with self._cond:
            self._cond.notify_all()

    def unpace(self) -> None:
        """Lift the pace of every ticket the gate knows: waits for a pace end now, and a call
        is not paced after it (until the governor sets a duty again)."""
        with self._cond:
            for ticket in self._tickets:
                ticket.duty, ticket.next_at = 1.0, 0.0
                ticket.spare_duty, ticket.spare_next_at = 1.0, 0.0
            self._cond.notify_all()

    def _in_spare(self, ticket: Ticket) -> bool:
        """Whether ``ticket``'s calls go in the spare units: low-priority token decode (the
        governor paces it) that fits in them; anything else takes its turn in the main ones."""
        return 0 < ticket.units <= self.spare and ticket.priority == 0 and ticket.kind == "lm"

    def _pools(self, ticket: Ticket, now: float) -> tuple[str, ...]:
        """Where ``ticket``'s calls may run now, in order of preference (see :data:`MAIN`)."""
        if self._in_spare(ticket):
            return (SPARE,)
        if ticket.short and 0 < ticket.units <= self.spare:
            return (MAIN, SPARE, OVER)
        if (
            ticket.in_main
            and 0 < ticket.units <= self.spare
            and ticket.spare_duty > 0
            and (ticket.spare_next_at <= now)
        ):
            return (MAIN, LENT)  # a second call of its own, beside the one in the main units
        return (MAIN,)

    def _start_in(self, ticket: Ticket, now: float, *, alone: bool) -> str | None:
        """Whether ``ticket`` may start now: None (not yet), else where (see :data:`MAIN`)."""
        if ticket.next_at > now:
            return None
        if self.units is None:
            return MAIN
        for pool in self._pools(ticket, now):
            if pool is OVER:
                # Beside a second call in the spare units, never held by it: a few ms over.
                if self._lent_used:
                    return OVER
                continue
            used, room = (self._used, self.units) if pool is MAIN else (self._spare_used, self.spare)
            if used and used + ticket.units > room:
                continue
            # The waiter with the least weighted run time among those that could start (in the
            # same units) goes first. A wider one that does not fit yet keeps its turn (no
            # overtaking it forever).
            spare = pool is not MAIN
            rivals = [w for w in self._waiting if w is not ticket and
                      any((p is not MAIN) == spare for p in self._pools(w, now))]  # fmt: skip
            if alone and not rivals:
                return pool
            if not alone and not any(o.next_at <= now and o.vtime < ticket.vtime for o in rivals):
                return pool
        return None

    def _account(self, now: float) -> None:
        dt = now - self._since
        self._since = now
        if dt <= 0:
            return
        kinds = [k for k, n in self._running.items() if n]
        if len(kinds) > 1:
            self._overlap_s += dt
            if "detect" in kinds and "lm" in kinds:
                self._detect_lm_s += dt

    # -- figures ------------------------------------------------------------------------------

    def stats(self) -> GateStats:
        with self._cond:
            self._account(self._clock())
            return GateStats(
                units=self.units, busy_s=dict(self._busy), overlap_s=self._overlap_s,
                detect_lm_overlap_s=self._detect_lm_s, waits=self._waits, waited_s=self._waited_s,
            )  # fmt: skip

    def tickets(self) -> list[Ticket]:
        return list(self._tickets)


_GATE = Gate(None)


def _process_gate() -> Gate:
    return _GATE


GATE = Slot("gate", _process_gate)
"""A governed run's own gate (its :class:`~edgepipe.sched.scheduler.Scheduler`'s)."""


def gate() -> Gate:
    """The gate of the run the caller works for (:mod:`edgepipe.core.scope`), else the
    process's (ungoverned unless :func:`set_gate` says otherwise)."""
    return GATE.get()


def set_gate(new: Gate) -> Gate:
    """Make ``new`` the process's gate, outside any run (a script's, a test's). Runs keep their own."""
    global _GATE
    _GATE = new
    return new
