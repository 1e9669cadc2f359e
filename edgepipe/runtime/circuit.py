"""A node's error policy at run time: failures counted, restarts with backoff, a circuit breaker.

Stages and sinks (``skip`` and ``restart``)::

    closed --(open_after failures in a row)--> open --(cool-down)--> half-open
      ^                                          ^                      |
      +------------- a success ------------------+---- a failure -------+

While the circuit is open the node's code is not called: items are taken from the inbox and
dropped (counted as ``skipped``), so upstream keeps its rate and a broken model costs nothing.
Half-open lets one item through (after restarting the hooks, under ``restart``); its success
closes the circuit, its failure opens it again for twice as long, up to ``cooldown_max_s``.
Each transition is logged, shown as the node's state in ``--stats`` and written as a
``node_state`` result.

``stop`` (and an error that says retrying cannot help, ``retryable = False``) stops the pipeline
at the first failure: :class:`~edgepipe.core.errors.NodeError`. Sources have no circuit: they
reopen with capped backoff, and stop the pipeline only after ``max_consecutive`` failures with
no item between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from edgepipe.core.backoff import Backoff
from edgepipe.core.errors import NodeError, error_text
from edgepipe.core.lease import Batch, Leased
from edgepipe.graph.spec import ErrorPolicy, NodeKind, OnError
from edgepipe.runtime.metrics import NodeMetrics

log = logging.getLogger(__name__)

_LOG_EVERY_S = 1.0
_clock = time.monotonic

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


class Circuit:
    """The error policy of one node. ``failures`` is 0 while all is well, so the per-item path
    only reads one integer."""

    __slots__ = (
        "_backoff",
        "_cooldown",
        "_cooldown_s",
        "_debug",
        "_emit_event",
        "_last_error",
        "_last_log",
        "_opened_at",
        "_restart_hooks",
        "_skipped_at_open",
        "_suppressed",
        "_until",
        "failures",
        "kind",
        "metrics",
        "node_id",
        "policy",
        "start_failures",
        "state",
    )

    def __init__(
        self,
        node_id: str,
        kind: NodeKind,
        policy: ErrorPolicy,
        metrics: NodeMetrics,
        emit_event: Callable[[str, Any], Awaitable[None]],
        restart_hooks: Callable[[float], Awaitable[None]],
        *,
        debug: bool = False,
    ) -> None:
        self.node_id = node_id
        self.kind = kind
        self.policy = policy
        self.metrics = metrics
        self._emit_event = emit_event
        self._restart_hooks = restart_hooks
        self._debug = debug
        self.failures = 0
        """Items' failures in a row; 0 once a call succeeds."""
        self.start_failures = 0
        """``start()`` failures in a row (under ``restart``); 0 once it succeeds."""
        self.state = CLOSED
        self._backoff = Backoff(policy.backoff_initial_s, policy.backoff_max_s)
        """Restarts' delays, by the count of failures in a row."""
        self._cooldown = Backoff(policy.cooldown_s, policy.cooldown_max_s)
        """How long the circuit stays open: doubled by each failed trial, reset by a success."""
        self._cooldown_s = self._cooldown.next()
        self._until = 0.0
        self._opened_at = 0.0
        self._skipped_at_open = 0
        self._last_error = ""
        self._last_log = -_LOG_EVERY_S
        self._suppressed = 0

    # -- per item (only while failures > 0) ---------------------------------------------------

    async def admit(self, item: Any) -> bool:
        """Whether the node's code may be called on ``item``. While the circuit is open, no:
        the item is released (if pooled) and counted as skipped. Half-open, one item is let
        through, and the rest are skipped until its outcome is known."""
        if self.state is HALF_OPEN or (self.state is OPEN and _clock() < self._until):
            self.skip(item)
            return False
        if self.state is OPEN:
            try:
                await self.begin_trial()
            except Exception as exc:  # the trial failed before the item was tried
                _release(item)
                await self.failed(exc)
                return False
            except BaseException:  # cancelled while the hooks restarted
                _release(item)
                raise
        return True

    def skip(self, item: Any) -> None:
        """Drop ``item`` uncalled (the circuit is open): counted, and given back if pooled."""
        self.metrics.skipped += len(item.items) if isinstance(item, Batch) else 1
        _release(item)

    def open_for_s(self) -> float:
        """How long the open circuit still skips (0 when it is not open or the cool-down is over)."""
        return max(0.0, self._until - _clock()) if self.state is OPEN else 0.0

    async def begin_trial(self) -> None:
        """Open and cooled down: half-open, after restarting the hooks under ``restart``.
        A stream stage's trial is the stream started again: it is let have every item until it
        yields (success) or raises (open again)."""
        await self._transition(HALF_OPEN, {"after_s": round(_clock() - self._opened_at, 2)})
        if self.policy.action is OnError.RESTART:
            await self._restart_hooks(0.0)

    async def succeeded(self) -> None:
        """A call succeeded: the failure count is reset, a half-open circuit closes."""
        self.failures = 0
        if self.state is not CLOSED:
            self._cooldown.reset()
            self._cooldown_s = self._cooldown.next()
            skipped = self.metrics.skipped - self._skipped_at_open
            log.warning("[%s] recovered: circuit closed after %.1f s, %d item(s) skipped", self.node_id,
                        _clock() - self._opened_at, skipped)  # fmt: skip
            await self._transition(CLOSED, {"skipped": skipped})

    # -- failures -----------------------------------------------------------------------------

    async def failed(self, exc: BaseException, *, restart_hooks: bool = True, reopen: bool = False) -> None:
        """Apply the policy to ``exc``. Returns to carry on; raises NodeError to stop the run.

        ``reopen``: the failure ended a source's iterator, which is opened again after the
        backoff even under ``skip``.
        """
        policy = self.policy
        self.metrics.errors += 1
        self.failures += 1
        what = error_text(exc)
        self._last_error = what
        await self._emit_event("error", {"error": type(exc).__name__, "message": str(exc)})
        if policy.action is OnError.STOP or getattr(exc, "retryable", True) is False:
            # The error itself may say that trying again cannot help (a missing file).
            if isinstance(exc, NodeError):
                raise exc
            raise NodeError(what, node_id=self.node_id) from exc
        if self.kind is NodeKind.SOURCE:
            if self.failures >= policy.max_consecutive:
                raise NodeError(f"{what} ({self.failures} failures in a row; giving up)",
                                node_id=self.node_id) from exc  # fmt: skip
            self._log(what, exc)
            if policy.action is OnError.RESTART or reopen:
                await self.backoff(restart_hooks)
            return
        if self.state is OPEN:
            # A call already under way when the circuit opened (a two-step node's queued run):
            # it says nothing new, and must not push the cool-down back.
            self._log(what, exc)
        elif self.state is HALF_OPEN:
            self._cooldown_s = self._cooldown.next()
            await self._open(what, exc)
        elif self.failures >= policy.open_after:
            self._opened_at = _clock()
            self._skipped_at_open = self.metrics.skipped
            await self._open(what, exc)
        else:
            self._log(what, exc)
            if policy.action is OnError.RESTART:
                await self.backoff(restart_hooks)

    async def start_failed(self, exc: BaseException) -> None:
        """``start()`` raised under ``restart``: wait (backoff) before it is tried again; give
        up after ``max_consecutive`` in a row, or at once if the error says retrying is futile.
        Counted apart from the items' failures (:attr:`start_failures`)."""
        self.metrics.errors += 1
        self.start_failures += 1
        what = error_text(exc)
        await self._emit_event("error", {"error": type(exc).__name__, "message": str(exc)})
        if getattr(exc, "retryable", True) is False:  # a missing file: trying again cannot help
            raise NodeError(what, node_id=self.node_id) from exc
        if self.start_failures >= self.policy.max_consecutive:
            raise NodeError(f"start() failed: {what} ({self.start_failures} in a row; giving up)",
                            node_id=self.node_id) from exc  # fmt: skip
        self._log(f"start() failed: {what}", exc)
        await self.backoff(restart_hooks=False, attempt=self.start_failures)

    async def backoff(self, restart_hooks: bool, attempt: int | None = None) -> None:
        """Wait (doubling with each failure in a row, capped), cycling the hooks if asked."""
        attempt = self.failures if attempt is None else attempt
        delay = self._backoff.delay_s(attempt)
        m = self.metrics
        m.restarts += 1
        m.state = "restarting"
        log.warning("[%s] restarting in %.2f s", self.node_id, delay)
        await self._emit_event("restart", {"delay_s": delay, "attempt": attempt})
        if restart_hooks:
            await self._restart_hooks(delay)
        else:
            await asyncio.sleep(delay)
        m.state = "running"

    async def _open(self, what: str, exc: BaseException) -> None:
        self._until = _clock() + self._cooldown_s
        log.error("[%s] %s; %d failure(s) in a row: circuit open, skipping items for %.1f s", self.node_id,
                  what, self.failures, self._cooldown_s,
                  exc_info=exc if self._debug else None)  # fmt: skip
        await self._transition(
            OPEN, {"failures": self.failures, "error": what, "cooldown_s": self._cooldown_s}
        )

    async def _transition(self, state: str, data: dict[str, Any]) -> None:
        self.state = state
        self.metrics.state = "running" if state is CLOSED else state
        await self._emit_event("node_state", {"node": self.node_id, "circuit": state, **data})

    def _log(self, what: str, exc: BaseException) -> None:
        # One line per second at most: a node failing on every frame must not flood the log.
        now = _clock()
        if now - self._last_log < _LOG_EVERY_S:
            self._suppressed += 1
            return
        more = f" (+{self._suppressed} more since last report)" if self._suppressed else ""
        log.error("[%s] %s; %s%s", self.node_id, what, self.policy.action.value, more,
                  exc_info=exc if self._debug else None)  # fmt: skip
        self._last_log = now
        self._suppressed = 0


def _release(item: Any) -> None:
    if isinstance(item, Leased):
        item.release()
