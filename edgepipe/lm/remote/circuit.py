"""Whether to send the next request to the engine: a circuit with a backoff.

- ``closed``: requests go to the engine.
- ``open``: the engine failed (down, loading, overloaded, too slow); nothing is sent until
  the backoff has passed (:class:`~edgepipe.core.backoff.Backoff`, 1 s doubling to 60 s with
  20% jitter, or the server's ``Retry-After`` if longer). Then one request tries it
  (``half_open``): it closes the circuit if it succeeds, opens it again, longer, if not.
- ``refused``: the engine refused the configuration (key, model name, URL). A wrong key does
  not fix itself: nothing is sent again in this run, and no retry loop hides the cause.

A request's own failure (a prompt past the context) changes nothing. Times come from
``clock`` (the event loop's by default), so a test drives it without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from edgepipe.core.backoff import Backoff
from edgepipe.lm.remote.errors import EngineConfigError, EngineError, EngineUnavailable

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"
REFUSED = "refused"
STATES = (CLOSED, OPEN, HALF_OPEN, REFUSED)
"""A gauge's value is the state's index: 0 closed ... 3 refused."""


class EngineCircuit:
    """One engine's circuit; one owner (the event loop) calls it."""

    def __init__(self, backoff: Backoff | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff = backoff or Backoff(1.0, 60.0, jitter=0.2)
        self.clock = clock
        self.state = CLOSED
        self.retry_at = 0.0
        """When an open circuit lets one request try the engine again."""
        self.opened = 0
        """Times it opened."""
        self.cause = ""
        """The latest failure's cause (``refused``, ``http_503`` ...); empty once it closes."""
        self.error = ""
        """The latest failure's message (redacted)."""

    def allows(self) -> bool:
        """Whether a request may go to the engine now. An open circuit past its backoff lets
        one through (``half_open``) and none beside it until that one ends."""
        if self.state == CLOSED:
            return True
        if self.state == OPEN and self.clock() >= self.retry_at:
            self.state = HALF_OPEN
            return True
        return False

    def retry_in_s(self) -> float:
        """Seconds until an open circuit tries again (0 when not open)."""
        return max(0.0, self.retry_at - self.clock()) if self.state == OPEN else 0.0

    def succeeded(self) -> None:
        self.state = CLOSED
        self.cause = ""
        self.error = ""
        self.backoff.reset()

    def failed(self, error: EngineError) -> None:
        """What ``error`` means for the next requests."""
        if isinstance(error, EngineConfigError):
            self.state = REFUSED
        elif isinstance(error, EngineUnavailable):
            if self.state == CLOSED:  # a new outage (a failed trial is the same one)
                self.opened += 1
            self.state = OPEN
            wait = self.backoff.next()
            if error.retry_after_s is not None:
                wait = max(wait, error.retry_after_s)
            self.retry_at = self.clock() + wait
        else:  # this request only
            if self.state == HALF_OPEN:  # the engine answered: it is up
                self.succeeded()
            return
        self.cause = error.cause
        self.error = str(error)

    def abandoned(self) -> None:
        """A request let through half-open ended without a verdict (cancelled): the next may try."""
        if self.state == HALF_OPEN:
            self.state = OPEN
            self.retry_at = self.clock()


__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "REFUSED", "STATES", "EngineCircuit"]
