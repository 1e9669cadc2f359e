"""Phases of periodic work, spread across every detector of a run.

With an interval of N frames and S streams in all (whatever detector each goes to), stream k
runs its model on phase ``k·N/S``: four cameras with ``every=4`` take turns, one per frame
time, instead of all hitting the model on the same frame and leaving three idle frame times.
Streams are numbered in the order first seen; a detector that is gone (garbage-collected) no
longer counts.

Each run has its own phases (made at its first read, in the run's scope:
:mod:`edgepipe.core.scope`): two runs in one process number their streams apart, as each has
its own CPU budget and gate. Outside any run (a script, a unit test) the process's apply.
"""

from __future__ import annotations

import itertools
import threading
import weakref

from edgepipe.core.scope import Slot


class Phases:
    """Stream numbers of every live owner (a detector). Thread-safe."""

    def __init__(self) -> None:
        self._owners: weakref.WeakKeyDictionary[object, dict[str, int]] = weakref.WeakKeyDictionary()
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._ranks: dict[int, int] = {}
        self._total = -1

    def phase(self, owner: object, source: str, every: float) -> float:
        """The frame (0 up to ``every``) of each interval on which ``owner`` runs ``source``
        (fractional with a fractional interval)."""
        if every <= 1:
            return 0
        with self._lock:
            streams = self._owners.get(owner)
            if streams is None:
                streams = self._owners[owner] = {}
            number = streams.get(source)
            if number is None:
                number = streams[source] = next(self._numbers)
            total = sum(len(s) for s in self._owners.values())
            if total != self._total or number not in self._ranks:
                ordered = sorted(n for s in self._owners.values() for n in s.values())
                self._ranks = {n: rank for rank, n in enumerate(ordered)}
                self._total = total
            k = self._ranks[number]
        return (k * every / total) % every

    @property
    def streams(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._owners.values())

    def forget(self, owner: object) -> None:
        """``owner`` stopped: its streams no longer take turns."""
        with self._lock:
            self._owners.pop(owner, None)

    def clear(self) -> None:
        with self._lock:
            self._owners.clear()


_PHASES = Phases()

PHASES: Slot[Phases] = Slot("stream phases", lambda: _PHASES, per_run=Phases)


def phases() -> Phases:
    """The current run's phases (a new run's are empty), else the process's."""
    return PHASES.get()
