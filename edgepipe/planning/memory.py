"""The memory plan: the long-lived buffers a process allocates, each named, summed against a budget.

A camera box runs for months; its memory must be known at start-up, not discovered at 3 a.m. by
the OOM killer. Whatever allocates a large buffer once and reuses it (a KV cache, a frame pool,
an inference tensor ring) reserves its bytes in the plan first::

    reservation = memory_plan().reserve("describe", "KV cache (gqa, 2048 positions)", nbytes,
                                        holder=cache)

The budget is ``EDGEPIPE_MEMORY_FRAC`` (default 0.7: the headroom of every other resource,
:data:`~edgepipe.core.headroom.HEADROOM`) of the memory this process may use: the machine's
RAM, or the container's cgroup limit when that is lower. A reservation that would pass it
raises :class:`MemoryBudgetError`, naming what asked, what the plan already holds and what to
do, before anything is allocated. A reservation ends with :meth:`Reservation.release`, or when
its ``holder`` is garbage-collected.
The runtime logs the plan once every node has started, and each reservation made after that
(buffers sized by the first frame); ``memory_plan().entries()`` lists it.

Each run has a plan of its own (:meth:`MemoryPlan.for_run`, reached by ``memory_plan()`` from
the run's code through :mod:`edgepipe.core.scope`): it lists that run's buffers (its snapshot's
``memory``), and makes each in the process's plan too, which holds every run's and refuses what
would take the process past its budget. Outside a run, ``memory_plan()`` is the process's.

A buffer on an accelerator (a KV cache in CUDA memory) is reserved with its ``device``: it is
named in the plan, but the budget is host memory and it does not count against it. A plan made
with ``refuse=False`` is a dry run (``edgepipe run FILE --plan``, see
:mod:`edgepipe.runtime.memory_plan`): it records every reservation, and keeps the error the first one
past the budget would have raised.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepipe.core.errors import EdgepipeError
from edgepipe.core.headroom import HEADROOM
from edgepipe.core.scope import Slot

log = logging.getLogger(__name__)

DEFAULT_BUDGET_FRAC = 1 - HEADROOM
"""The share of the memory this process may use that the plan holds (``EDGEPIPE_MEMORY_FRAC``)."""


class MemoryBudgetError(EdgepipeError, MemoryError):
    """A buffer would take the memory plan past its budget."""

    retryable = False  # the same buffer will not fit on a retry either

    def __init__(self, message: str, *, owner: str, needed_bytes: int, budget_bytes: int) -> None:
        super().__init__(message)
        self.owner = owner
        self.needed_bytes = needed_bytes
        self.budget_bytes = budget_bytes


@dataclass(frozen=True)
class Reservation:
    """Bytes of one long-lived buffer, in the plan until released."""

    owner: str
    """Who holds it: a node id, or a model's name outside a pipeline."""
    what: str
    nbytes: int
    plan: MemoryPlan
    key: int
    """Its place in the order of reservations."""
    device: str = ""
    """Where it lives when not in host memory (``cuda:0``); such a buffer is outside the budget."""

    def release(self) -> None:
        """Take it out of the plan (again is harmless)."""
        self.plan._release(self.key)


def format_bytes(nbytes: float) -> str:
    """``12.3 MB``, ``1.60 GB``: how the plan writes sizes."""
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.1f} MB"


class MemoryPlan:
    """The reservations of one process. Thread-safe (models load on worker threads)."""

    def __init__(
        self,
        budget_frac: float | None = None,
        limit_bytes: int | None = None,
        *,
        refuse: bool = True,
        parent: MemoryPlan | None = None,
    ) -> None:
        """``refuse=False``: a dry run, where a reservation past the budget is recorded all the same
        and the first one's error kept in :attr:`first_refusal`. ``parent``: see :meth:`for_run`."""
        self.parent = parent
        if parent is not None:  # the same memory: the parent's budget
            budget_frac = parent.budget_frac if budget_frac is None else budget_frac
            limit_bytes = parent.limit_bytes if limit_bytes is None else limit_bytes
        if budget_frac is None:
            text = os.environ.get("EDGEPIPE_MEMORY_FRAC", str(DEFAULT_BUDGET_FRAC))
            try:
                budget_frac = float(text)
            except ValueError:
                budget_frac = -1.0
        if not 0 < budget_frac <= 1:
            raise ValueError(
                "the memory budget fraction (EDGEPIPE_MEMORY_FRAC) must be a number in (0, 1], "
                f"not {budget_frac}"
            )
        frac = budget_frac
        self.budget_frac: float = frac
        self.limit_bytes: int | None = limit_bytes if limit_bytes is not None else memory_limit_bytes()
        self._entries: dict[int, Reservation] = {}
        self._keys = itertools.count()
        self._lock = threading.Lock()
        # Releases only queue their key (deque.append is atomic): a release can come from a
        # garbage-collector finalizer, which may run inside a locked section of this very
        # thread. Every locked section first drains the queue.
        self._released: deque[int] = deque()
        self.announced = False
        """Set once the plan was logged; later reservations are logged one by one."""
        self.refuse = refuse
        self.first_refusal: MemoryBudgetError | None = None
        """A dry run's first reservation past the budget: the error it would have raised."""
        self.listeners: list[Callable[[Reservation], None]] = []
        """Called with every reservation made (``edgepipe trace`` counts buffers rebuilt)."""
        self._in_parent: dict[int, Reservation] = {}
        """Per reservation of this plan, the same bytes in the parent's."""

    @classmethod
    def for_run(cls, parent: MemoryPlan | None = None) -> MemoryPlan:
        """A run's own plan: it lists and announces that run's reservations only, and each is
        made in ``parent`` (default: the process's plan) too, which refuses what would take the
        process past its budget: two runs in one process share one memory."""
        return cls(parent=parent if parent is not None else process_plan())

    @property
    def budget_bytes(self) -> int | None:
        return None if self.limit_bytes is None else int(self.limit_bytes * self.budget_frac)

    def _drain(self) -> None:
        # Under the lock. popleft is atomic too, so a finalizer appending meanwhile is safe.
        released = self._released
        while released:
            self._entries.pop(released.popleft(), None)

    @property
    def total_bytes(self) -> int:
        """Host memory held: what counts against the budget (device buffers do not)."""
        with self._lock:
            self._drain()
            return sum(r.nbytes for r in list(self._entries.values()) if not r.device)

    def entries(self) -> list[Reservation]:
        """What the plan holds, largest first."""
        with self._lock:
            self._drain()
            return sorted(list(self._entries.values()), key=lambda r: -r.nbytes)

    def reserve(
        self,
        owner: str,
        what: str,
        nbytes: int,
        *,
        holder: Any = None,
        hint: str = "make it smaller",
        device: str = "",
    ) -> Reservation:
        """Add ``nbytes`` for ``what`` to the plan, or raise :class:`MemoryBudgetError` (whose
        message ends with ``hint``, what to do, or raising EDGEPIPE_MEMORY_FRAC).

        With ``holder``, the reservation ends when that object is garbage-collected. With
        ``device`` (``cuda:0``), the buffer is in that device's memory: named, never refused.
        """
        if self.parent is not None:
            return self._reserve_in_parent(self.parent, owner, what, int(nbytes), holder, hint, device)
        budget = self.budget_bytes
        reservation = Reservation(owner, what, int(nbytes), self, next(self._keys), device)
        # Before it is in the plan: a holder that cannot be weakly referenced fails here, cleanly.
        finalizer = weakref.finalize(holder, self._release, reservation.key) if holder is not None else None
        with self._lock:
            self._drain()
            entries = [r for r in self._entries.values() if not r.device]
            held = sum(r.nbytes for r in entries)
            if not device and budget is not None and held + nbytes > budget:
                biggest = sorted(entries, key=lambda r: -r.nbytes)[:3]
                holding = (
                    ", ".join(f"{format_bytes(r.nbytes)} {r.what} ({r.owner})" for r in biggest) or "nothing"
                )
                error = MemoryBudgetError(
                    f"{owner}: {what} needs {format_bytes(nbytes)}, and the memory plan already holds "
                    f"{format_bytes(held)} ({holding}) of its {format_bytes(budget)} budget "
                    f"({self.budget_frac:.0%} of the {format_bytes(self.limit_bytes or 0)} this process "
                    f"may use); {hint}, or raise EDGEPIPE_MEMORY_FRAC",
                    owner=owner, needed_bytes=nbytes, budget_bytes=budget,
                )  # fmt: skip
                if self.refuse:
                    if finalizer is not None:
                        finalizer.detach()
                    raise error
                if self.first_refusal is None:
                    self.first_refusal = error
            self._entries[reservation.key] = reservation
        return self._announced(reservation)

    def _reserve_in_parent(self, parent: MemoryPlan, owner: str, what: str, nbytes: int, holder: Any,
                           hint: str, device: str) -> Reservation:  # fmt: skip
        """Made in the parent first (the process's budget is the one that refuses), then kept
        here; released with it."""
        in_parent = parent.reserve(owner, what, nbytes, holder=holder, hint=hint, device=device)
        reservation = Reservation(owner, what, nbytes, self, next(self._keys), device)
        self._in_parent[reservation.key] = in_parent
        if holder is not None:
            weakref.finalize(holder, self._release, reservation.key)
        with self._lock:
            self._drain()
            self._entries[reservation.key] = reservation
        return self._announced(reservation)

    def _announced(self, reservation: Reservation) -> Reservation:
        for listener in self.listeners:
            listener(reservation)
        if self.announced:  # buffers sized by the first frame come after the plan was logged
            total = self.total_bytes
            log.info(
                "memory plan: + %s %s (%s); %s in all",
                format_bytes(reservation.nbytes),
                reservation.what,
                _label(reservation),
                format_bytes(total),
            )
        return reservation

    def as_data(self) -> dict[str, Any]:
        """The plan as plain data: ``total_bytes`` (host memory held), ``budget_bytes`` and
        ``reservations`` (each ``owner``, ``what``, ``nbytes``, ``device``), largest first."""
        entries = self.entries()
        return {
            "total_bytes": sum(r.nbytes for r in entries if not r.device),
            "budget_bytes": self.budget_bytes,
            "reservations": [{"owner": r.owner, "what": r.what, "nbytes": r.nbytes, "device": r.device}
                             for r in entries],
        }  # fmt: skip

    def announce(self) -> None:
        """Log the plan (the runtime does, once every node has started); later reservations
        are logged one by one."""
        self.announced = True
        if self.total_bytes:
            log.info("%s", self.summary())

    def _release(self, key: int) -> None:
        self._released.append(key)  # never locks: see __init__
        in_parent = self._in_parent.pop(key, None)  # dict.pop is atomic: no lock either
        if in_parent is not None:
            in_parent.release()

    def summary(self) -> str:
        """One line: each reservation, the total and the budget."""
        parts = [f"{format_bytes(r.nbytes)} {r.what} ({_label(r)})" for r in self.entries()]
        budget = self.budget_bytes
        of = f" of a {format_bytes(budget)} budget" if budget is not None else ""
        return f"memory plan: {format_bytes(self.total_bytes)}{of}" + (
            ": " + "; ".join(parts) if parts else ""
        )


def _label(reservation: Reservation) -> str:
    """Who holds it, and where when that is not host memory."""
    device = reservation.device
    return f"{reservation.owner}, on {device}" if device else reservation.owner


def memory_limit_bytes() -> int | None:
    """RAM this process may use: physical memory, or a cgroup's limit (its own or an
    ancestor's, v2 or v1) when lower."""
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not a POSIX system that says
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    limits += _cgroup_limits()
    return min(limits) if limits else None


def _cgroup_limits(
    proc: Path = Path("/proc/self/cgroup"), sys_root: Path = Path("/sys/fs/cgroup")
) -> list[int]:
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and not controllers:  # v2: one tree
            root, name = sys_root, "memory.max"
        elif "memory" in controllers.split(","):  # v1: the memory controller's tree
            root, name = sys_root / "memory", "memory.limit_in_bytes"
        else:
            continue
        group = Path(path.lstrip("/"))
        for folder in (group, *group.parents):  # a limit set on a parent applies too
            try:
                text = (root / folder / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 1 << 60:  # "max", or v1's "unlimited" (a huge number)
                found.append(int(text))
    return found


_PLAN: MemoryPlan | None = None
"""The process's plan (outside any run; every run's plan makes its reservations here too)."""
_PLAN_LOCK = threading.Lock()


def process_plan() -> MemoryPlan:
    """The process's plan (created on first use, from the environment then)."""
    global _PLAN
    with _PLAN_LOCK:
        if _PLAN is None:
            _PLAN = MemoryPlan()
        return _PLAN


PLAN = Slot("memory plan", process_plan)
"""A run's own plan (:meth:`MemoryPlan.for_run`), put in its scope by the runtime."""


def memory_plan() -> MemoryPlan:
    """The plan of the run the caller works for (:mod:`edgepipe.core.scope`), else the
    process's."""
    return PLAN.get()
