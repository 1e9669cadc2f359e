"""The deadlines of a stop: the whole of it fits in the drain deadline + 1 s.

From the first stop request (SIGTERM, ``--duration``), queued items get ``drain_timeout_s``
to drain; then what remains is cancelled. What must still run after that is bounded too: a
node's ``stop()`` hook (a recording's last frames) until :data:`HOOK_GRACE_S` past the drain
deadline, the results left to write until the drain deadline, at least
:data:`RESULTS_CLOSE_MIN_S`. The HTTP server gives a request in progress 2 x 0.2 s
(:mod:`edgepipe.serve.app`), and the command leaves an open or a model call in progress behind
(:mod:`edgepipe.core.native`). A run that ends by itself has no drain deadline: hooks and the
results get ``stop_timeout_s``.
"""

from __future__ import annotations

import time

HOOK_GRACE_S = 0.5
"""After a stop, a node's stop() hook may run this long past the drain deadline (a forced stop
lets a hook in progress finish), and never longer than ``stop_timeout_s``."""
RESULTS_CLOSE_MIN_S = 0.3
"""After a stop, the results left to write get what remains of the drain deadline, and at least
this long (a forced stop used it all)."""


class StopDeadlines:
    """When the stop of one run was asked for, and what each part of it may take from now."""

    def __init__(self, drain_timeout_s: float, stop_timeout_s: float) -> None:
        self.drain_timeout_s = drain_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.requested_t: float | None = None
        """When the first stop was asked for (monotonic seconds); None before."""

    def request(self) -> None:
        if self.requested_t is None:
            self.requested_t = time.monotonic()

    def hook_s(self) -> float:
        """How long a stop() hook starting now may take."""
        if self.requested_t is None:
            return self.stop_timeout_s
        left = self.requested_t + self.drain_timeout_s + HOOK_GRACE_S - time.monotonic()
        return min(self.stop_timeout_s, max(HOOK_GRACE_S, left))

    def results_s(self) -> float:
        """How long the results left to write may take, from now."""
        if self.requested_t is None:
            return self.stop_timeout_s
        return max(RESULTS_CLOSE_MIN_S, self.requested_t + self.drain_timeout_s - time.monotonic())
