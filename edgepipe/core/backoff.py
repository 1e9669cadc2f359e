"""How long to wait before trying again: :class:`Backoff`, the one schedule of every retry.

The delays start at ``initial_s`` and grow by ``factor`` per failure in a row, up to ``max_s``;
each is spread by ±``jitter`` (0.2: 80% to 120%) so that a fleet of cameras cut off by the
same outage does not come back in step. A success calls :meth:`Backoff.reset`.

Used by a node's restarts (:mod:`edgepipe.runtime.circuit`), a video source's reopening
(:mod:`edgepipe.media.sources.reconnect`), the MQTT connection
(:mod:`edgepipe.sinks.mqtt.client`) and the CPU gate's second calls that ran too slowly
(:mod:`edgepipe.sched.ticket`). ``random`` is injectable, so a test can pin the jitter.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable


class Backoff:
    """Delays in seconds: ``initial_s``, then ``factor`` times the last, at most ``max_s``.

    Every delay is at most ``max_s``, the first one included. Raises ``ValueError`` for a bound
    that is not a finite number >= 0, a ``factor`` below 1 or a ``jitter`` outside [0, 1). Not
    thread-safe: one owner calls it.
    """

    __slots__ = ("_next_s", "_random", "attempt", "factor", "initial_s", "jitter", "max_s")

    def __init__(
        self,
        initial_s: float,
        max_s: float,
        *,
        factor: float = 2.0,
        jitter: float = 0.0,
        random: Callable[[], float] = _random.random,
    ) -> None:
        for name, value in (("initial_s", initial_s), ("max_s", max_s)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"backoff {name} must be a finite number of seconds >= 0, got {value!r}")
        if not (math.isfinite(factor) and factor >= 1):
            raise ValueError(f"backoff factor must be at least 1, got {factor!r}")
        if not 0 <= jitter < 1:
            raise ValueError(f"backoff jitter must be in [0, 1), got {jitter!r}")
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self.jitter = jitter
        self._random = random
        """A number in [0, 1), as :func:`random.random` gives."""
        self.attempt = 0
        """Delays given since the last :meth:`reset`."""
        self._next_s = min(initial_s, max_s)

    def next(self) -> float:
        """The delay before the next try (jittered); the one after it grows by ``factor``."""
        delay = self._next_s
        self.attempt += 1
        self._next_s = min(self._next_s * self.factor, self.max_s)
        return self.jittered(delay)

    def peek(self) -> float:
        """The delay :meth:`next` would give, before jitter."""
        return self._next_s

    def reset(self) -> None:
        """A success (or a new outage): the next delay is ``initial_s`` again."""
        self.attempt = 0
        self._next_s = min(self.initial_s, self.max_s)

    def delay_s(self, attempt: int) -> float:
        """The delay after ``attempt`` failures in a row (1: ``initial_s``), jittered; for a
        caller that counts its failures itself. Does not change :meth:`next`'s schedule."""
        try:
            nominal = self.initial_s * self.factor ** (max(1, attempt) - 1)
        except OverflowError:  # thousands of failures in a row: long since at the cap
            nominal = self.max_s
        return self.jittered(min(nominal, self.max_s))

    def jittered(self, delay_s: float) -> float:
        """``delay_s`` spread by ±``jitter`` (unchanged without jitter)."""
        if not self.jitter:
            return delay_s
        return delay_s * (1.0 + self.jitter * (2.0 * self._random() - 1.0))


__all__ = ["Backoff"]
