"""One call of a node's code under its deadline: on the node's executor, or awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from edgepipe.core.errors import NodeTimeout
from edgepipe.core.lease import Leased, release_later


async def call_in_thread(
    executor: Any, node_id: str, fn: Callable[[Any], Any], item: Any, timeout_s: float | None
) -> Any:
    """``fn(item)`` on ``executor``; past ``timeout_s``, :class:`NodeTimeout` and the call is
    abandoned to its thread."""
    future = executor.submit(fn, item)
    waiting = asyncio.wrap_future(future)
    if timeout_s is None:
        return await waiting
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            return await waiting
    except TimeoutError as exc:
        if not deadline.expired():
            raise
        # The thread cannot be interrupted: it is abandoned and finishes on its own. A pooled
        # input stays leased to it until then, so its buffer is not reused under it.
        if isinstance(item, Leased):
            item.retain()
            future.add_done_callback(release_later(asyncio.get_running_loop(), item))
        raise NodeTimeout(f"call took longer than timeout_s={timeout_s}", node_id=node_id) from exc


async def call_with_deadline(
    call: Callable[[Any], Awaitable[Any]], item: Any, timeout_s: float, node_id: str
) -> Any:
    """``await call(item)``, cancelled past ``timeout_s`` (:class:`NodeTimeout`)."""
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            return await call(item)
    except TimeoutError as exc:
        if deadline.expired():
            raise NodeTimeout(f"call took longer than timeout_s={timeout_s}", node_id=node_id) from exc
        raise
