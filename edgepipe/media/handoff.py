"""Handing decoded frames from a source's decode thread to the event loop."""

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

    def post(self, kind: str, payload: Any) -> bool:
        """From the decode thread. False if the loop is gone."""
        try:
            self._loop.call_soon_threadsafe(self._push, kind, payload)
        except RuntimeError:
            return False
        return True

    def _push(self, kind: str, payload: Any) -> None:
        self._items.append((kind, payload))
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> tuple[str, Any]:
        while not self._items:
            self._waiter = self._loop.create_future()
            await self._waiter
        return self._items.popleft()

    def drain(self) -> None:
        """Release whatever frames were never taken."""
        while self._items:
            kind, payload = self._items.popleft()
            if kind == "frame":
                payload.release()
