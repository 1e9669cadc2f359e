"""Waiting in tests for what a stream counts (its clients, its refusals)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Return once ``condition()`` holds; fail past ``timeout_s`` (a generous deadline)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.01)
