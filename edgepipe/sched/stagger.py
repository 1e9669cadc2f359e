"""Phases of periodic work, spread across every detector of the process.

With an interval of N frames and S streams in all (whatever detector each goes to), stream k
runs its model on phase ``k·N/S``: four cameras with ``every=4`` take turns, one per frame
time, instead of all hitting the model on the same frame and leaving three idle frame times.
"""

from __future__ import annotations

import threading


class Phases:
    """Stream numbers, in the order streams are first seen. Thread-safe."""

    def __init__(self) -> None:
        self._streams: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def phase(self, owner: str, source: str, every: int) -> int:
        """The frame (0..every-1) of each interval on which ``owner`` runs ``source``."""
        key = (owner, source)
        k = self._streams.get(key)
        if k is None:
            with self._lock:
                k = self._streams.setdefault(key, len(self._streams))
        streams = len(self._streams)
        return (k * every // streams) % every if every > 1 else 0

    @property
    def streams(self) -> int:
        return len(self._streams)

    def clear(self) -> None:
        with self._lock:
            self._streams.clear()


_PHASES = Phases()


def phases() -> Phases:
    """The process's phases (cleared when a run starts)."""
    return _PHASES
