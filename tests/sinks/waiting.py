"""Waiting in tests for what a stream counts (its clients, its refusals)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Whether ``condition()`` came to hold within ``timeout_s`` (a generous deadline). Never
    raises: a source waiting for clients goes on without them (and the test's assertions say
    what was missed) rather than fail, restart and wait again for ever."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True
