"""Handing decoded frames from a source's decode thread to the event loop.

The thread appends to a deque (atomic in CPython) and wakes the loop only when the loop is
parked waiting for it: while the consumer is busy, frames pass without a wake-up (a write to
the loop's self-pipe and a context switch per frame). The loop announces that it will park,
then looks once more before parking, so an item appended in between is never missed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any


class Handoff:
    """Decode thread -> event loop. Bounded by construction: every frame in it holds a pool
    slot, and state messages come at most once per reconnect attempt."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: deque[tuple[str, Any]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._parked = False

    def post(self, kind: str, payload: Any) -> bool:
        """From the decode thread. False if the loop is gone."""
        self._items.append((kind, payload))
        if self._parked:
            try:
                self._loop.call_soon_threadsafe(self._wake)
            except RuntimeError:
                return False
        elif self._loop.is_closed():
            return False
        return True

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> tuple[str, Any]:
        items = self._items
        while not items:
            self._waiter = self._loop.create_future()
            self._parked = True
            if items:  # appended while we were getting ready to park
                self._parked = False
                break
            try:
                await self._waiter
            finally:
                self._parked = False
        return items.popleft()

    def drain(self) -> int:
        """Release whatever frames were never taken; how many."""
        count = 0
        while self._items:
            kind, payload = self._items.popleft()
            if kind == "frame":
                payload.release()
                count += 1
        return count
