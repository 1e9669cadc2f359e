"""Keeping time in a decode thread: a file played at its own speed, a scene at its frame rate.

Both wait through ``wait(seconds) -> stopped`` (the source's stop event), so that stopping a
source ends a wait at once, and read ``clock`` (``time.monotonic``; tests give their own).
"""

from __future__ import annotations

import time
from collections.abc import Callable

Wait = Callable[[float], bool]
"""Sleep for the seconds given unless stopped; True if stopped."""
Clock = Callable[[], float]


class Pacer:
    """Holds each frame until its presentation time (``realtime=True`` on a file).

    The first frame sets the origin (its timestamp is "now"); a frame without a timestamp
    passes at once. One pacer per opening of the input: a reopened or looped file starts again
    from its own first frame.
    """

    def __init__(self, wait: Wait, clock: Clock = time.monotonic) -> None:
        self._wait = wait
        self._clock = clock
        self._origin: float | None = None

    def pace(self, t: float | None) -> None:
        """Return when the frame of timestamp ``t`` (seconds) is due, or the source stops."""
        now = self._clock()
        if t is None:
            if self._origin is None:
                self._origin = now
            return
        if self._origin is None:
            self._origin = now - t
            return
        delay = self._origin + t - now
        if delay > 0:
            self._wait(delay)


class Ticker:
    """A fixed frame rate, from the moment it is made (a synthetic camera)."""

    def __init__(self, fps: float, wait: Wait, clock: Clock = time.monotonic) -> None:
        self._interval = 1.0 / fps
        self._wait = wait
        self._clock = clock
        self._next = clock()

    def tick(self) -> bool:
        """Wait until the next frame is due; True if the source stopped meanwhile."""
        self._next += self._interval
        delay = self._next - self._clock()
        if delay < -1.0:
            self._next = self._clock()  # fell far behind (a paused machine): do not burst
            return False
        return delay > 0 and self._wait(delay)
