"""Steady output: a node's results leave each lane at the rhythm its items came in.

A detector fed by several cameras runs the model on one frame in N of each and carries the
boxes over the others; a carried frame after a model frame waits for that frame's result (its
tracker needs it, and its camera's order is kept), then leaves with the ones behind it: each
camera's results come in bursts, one a model run. A node whose code says ``steady`` (True,
read at each result) has each result of a lane leave at its frame's decode time
(``t_decoded_ns``) plus one presentation delay, as a jitter buffer plays packets out: the
camera's rhythm, whatever the model's.

The delay is the 95th percentile of how old the results of the node's calls were when they
were ready (a model frame: its wait, its run, the tracker), over the last
:data:`WINDOW` calls, plus :data:`MARGIN_NS`; it follows a rise at once and a fall slowly
(:data:`EASE`), so that it does not pull results forward in a burst of its own. A result past
its time (a slower call than the percentile) leaves at once, and those behind it in its lane
with it. Results with no decode time leave as they are ready. At most :data:`MAX_DELAY_NS` of
delay and :data:`MAX_WAITING` results a lane are held: past either, they leave at once. A
result that says how old it is (a ``latency_ms`` attribute, as
:class:`~edgepipe.vision.Detections` does) is told its age as it leaves: the delay is part of
what its consumers see, and it says so.

Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from edgepipe.core.lease import Leased

WINDOW = 12
"""Calls whose results' ages set the delay: a few seconds' worth at a few model runs a second,
so that the start of a run (its model frames queued while the figures settle) is soon forgotten."""
MARGIN_NS = 5_000_000
EASE = 0.25
"""Of the way down to a lower target the delay goes with each call's result: a step of a few
frames at most, that a second's count hardly sees."""
MAX_DELAY_NS = 1_000_000_000
MAX_WAITING = 64


class Presenter:
    """The results of one node waiting for their time, per lane, in order."""

    def __init__(
        self, emit: Callable[[Any], Awaitable[None]], clock: Callable[[], int] = time.monotonic_ns
    ) -> None:
        """``emit``: hands a result on (the node's outputs); ``clock``: ``time.monotonic_ns``,
        the decoders' clock, or a test's."""
        self._emit_now = emit
        self._clock = clock
        self.delay_ns = 0
        self._ages: deque[int] = deque(maxlen=WINDOW)
        self._lanes: dict[str, deque[tuple[int, Any]]] = {}
        self._wake: asyncio.Future[None] | None = None
        self.ended = False
        self.on = True
        """Results wait for their time (the node's ``steady`` now); off, they leave as they are
        ready, but behind any of their lane still waiting."""

    def called(self, out: Any) -> None:
        """``out`` came of a call of the node's (not a light item): its age informs the delay."""
        born = _born(out)
        if born is None:
            return
        self._ages.append(self._clock() - born)
        ages = sorted(self._ages)
        target = min(MAX_DELAY_NS, ages[int(0.95 * (len(ages) - 1))] + MARGIN_NS)
        if target >= self.delay_ns:
            self.delay_ns = target
        else:
            self.delay_ns -= int((self.delay_ns - target) * EASE)

    async def put(self, lane: str, out: Any) -> None:
        """Emit ``out`` (the next result of ``lane``) at its time: at once when it has none, when
        that time has passed and nothing of its lane waits, or when its lane holds too many."""
        born = _born(out)
        waiting = self._lanes.get(lane)
        due = born + (self.delay_ns if self.on else 0) if born is not None else 0
        if not waiting and due <= self._clock():
            await self._emit(out)
            return
        if waiting is None:
            waiting = self._lanes[lane] = deque()
        waiting.append((due, out))
        if len(waiting) > MAX_WAITING:
            await self._emit(waiting.popleft()[1])
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _emit(self, out: Any) -> None:
        born = _born(out)
        if born is not None and getattr(out, "latency_ms", None) is not None:
            out.latency_ms = (self._clock() - born) / 1e6
        await self._emit_now(out)

    def end(self) -> None:
        """No more results: those waiting leave now."""
        self.ended = True
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def run(self) -> None:
        """Emit each waiting result at its time, until :meth:`end` and every one has left."""
        loop = asyncio.get_running_loop()
        while True:
            now = self._clock()
            for waiting in self._lanes.values():
                while waiting and (waiting[0][0] <= now or self.ended):
                    await self._emit(waiting.popleft()[1])
            if self.ended and not any(self._lanes.values()):
                return
            soonest = min((w[0][0] for w in self._lanes.values() if w), default=None)
            wake = self._wake = loop.create_future()
            # A timer on the loop's own clock (its time is monotonic, as the decoders'), not an
            # asyncio.timeout: that cancels the task and raises to end each wait, which cost
            # ~0.1 ms of the loop for every result of a camera (a third of what it spent on one).
            timer = None if soonest is None else loop.call_later(max(0.0, (soonest - now) / 1e9), _set, wake)
            try:
                await wake
            finally:
                self._wake = None
                if timer is not None:
                    timer.cancel()

    def close(self) -> None:
        """Results nobody will emit (the node was cancelled) go back."""
        for waiting in self._lanes.values():
            while waiting:
                out = waiting.popleft()[1]
                if isinstance(out, Leased):
                    out.release()


def _born(out: Any) -> int | None:
    """When ``out``'s frame left its decoder (``time.monotonic_ns``); None when it says not."""
    born = getattr(out, "t_decoded_ns", None)
    return born if isinstance(born, int) and born > 0 else None


def _set(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
