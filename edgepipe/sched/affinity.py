"""Heavy calls on some cores, everything else on the others: the decoders stop preempting the
model.

Four 1080p decoders each wake thirty times a second for a couple of milliseconds. Left to the
kernel, each wake-up may land on the core where a model run is under way and preempt it: a
CenterFace run of 49 CPU-ms took 72 ms of wall time beside four such decoders on 2 cores, and
55 ms with the model's thread on one core and the decoders on the other (measured here, the
same processes, only the affinity changed). The gate already admits heavy calls (model runs,
token steps, encodes) ``units`` at a time, so ``units`` cores are all they need: those become
the *heavy* cores, and the decoders, the event loop and the light threads keep the rest.

:class:`CoreSplit` is the plan for the process's cores; :func:`pin_heavy` is called by the gate on
the thread of each heavy call (once per thread: a thread that ran one stays on the heavy cores),
:func:`pin_light` by a decode thread as it starts and by the scheduler for the event loop's
thread (threads it starts later inherit its cores). The split is the run's (its scheduler puts
it in the run's scope, :mod:`edgepipe.core.scope`): a thread pins by the split of the run it
works for, and pins again when another run's split is in force. Only governed runs split the cores, only
where the process has at least two and the light side keeps one, and ``EDGEPIPE_AFFINITY=0``
turns it off. Linux only (elsewhere nothing is pinned).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from edgepipe.core.scope import Slot

log = logging.getLogger("edgepipe.sched")

ENV = "EDGEPIPE_AFFINITY"


@dataclass(frozen=True, slots=True)
class CoreSplit:
    """Which cores run heavy calls and which the rest."""

    heavy: frozenset[int]
    light: frozenset[int]

    def describe(self) -> str:
        return f"heavy calls on core(s) {_cores(self.heavy)}, decode and the rest on {_cores(self.light)}"


def _cores(cores: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cores))


def plan(units: int | None, allowed: frozenset[int] | None = None) -> CoreSplit | None:
    """The split for ``units`` heavy calls at once (the gate's), or None: ungoverned
    (``units`` None), fewer than two cores, no core left for the rest, or turned off."""
    if units is None or os.environ.get(ENV, "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    if allowed is None:
        try:
            allowed = frozenset(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # not Linux
            return None
    cores = sorted(allowed)
    if len(cores) < 2 or units >= len(cores):
        return None
    # The last cores for heavy work: the first usually takes the interrupts.
    return CoreSplit(heavy=frozenset(cores[-units:]), light=frozenset(cores[:-units]))


SPLIT: Slot[CoreSplit | None] = Slot("core split", lambda: None)
"""A governed run's split (its scheduler puts it in the run's scope; none outside a run)."""
_local = threading.local()


def current() -> CoreSplit | None:
    """The split of the run the caller works for (None: nothing is pinned)."""
    return SPLIT.get()


def _pin(split: CoreSplit, side: str) -> bool:
    pinned = getattr(_local, "pinned", None)
    if pinned is not None and pinned[0] is split and pinned[1] == side:  # by this split already
        return True
    cores = split.heavy if side == "heavy" else split.light
    try:
        os.sched_setaffinity(0, cores)  # 0: the calling thread only
    except (AttributeError, OSError, ValueError) as exc:
        log.debug("could not pin a thread to cores %s: %s", _cores(cores), exc)
        return False
    _local.pinned = (split, side)
    return True


def pin_heavy() -> None:
    """Put the calling thread on the heavy cores (a no-op when nothing is split, or it is
    there already). Called before a heavy call, on its thread."""
    split = SPLIT.get()
    if split is not None:
        _pin(split, "heavy")


def pin_light() -> None:
    """Put the calling thread on the light cores (a decode thread, the event loop's)."""
    split = SPLIT.get()
    if split is not None:
        _pin(split, "light")


@contextlib.contextmanager
def heavy_scope() -> Iterator[None]:
    """The calling thread on the heavy cores for the ``with`` block, then back on its own: an
    ONNX Runtime session built inside starts its intra-op threads there (they inherit the
    cores of the thread that creates them)."""
    split = SPLIT.get()
    if split is None:
        yield
        return
    try:
        before = frozenset(os.sched_getaffinity(0))
        os.sched_setaffinity(0, split.heavy)
    except (AttributeError, OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.sched_setaffinity(0, before)


def unpin(cores: frozenset[int]) -> None:
    """Give the calling thread ``cores`` back (the process's own, at the end of a run)."""
    try:
        os.sched_setaffinity(0, cores)
    except (AttributeError, OSError, ValueError):
        return
    _local.pinned = None
