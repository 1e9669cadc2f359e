"""One call of a node's code under its deadline: on the node's executor, or awaited."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

from edgepipe.core.cputime import CODE, run_counted
from edgepipe.core.errors import NodeTimeout
from edgepipe.core.lease import Batch, Leased, release_later


async def call_in_thread(
    executor: Any,
    node_id: str,
    fn: Callable[..., Any],
    item: Any,
    timeout_s: float | None,
    lane: str | None = None,
) -> Any:
    """``fn(item)`` (``fn(item, lane)`` when a lane is given) on ``executor``, its CPU counted
    as the node's ``code`` (:mod:`~edgepipe.core.cputime`); past ``timeout_s``,
    :class:`NodeTimeout` and the call is abandoned to its thread."""
    key = (node_id, CODE)
    future = (
        executor.submit(run_counted, key, fn, item)
        if lane is None
        else executor.submit(run_counted, key, fn, item, lane)
    )
    waiting = asyncio.wrap_future(future)
    if timeout_s is None:
        try:
            return await waiting
        except asyncio.CancelledError:
            abandon(future, item)
            raise
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            return await waiting
    except TimeoutError as exc:
        if not deadline.expired():
            raise
        abandon(future, item)
        raise NodeTimeout(f"call took longer than timeout_s={timeout_s}", node_id=node_id) from exc
    except asyncio.CancelledError:
        abandon(future, item)
        raise


def abandon(future: Future[Any], item: Any) -> None:
    """The thread cannot be interrupted: it finishes on its own. A pooled input stays leased
    to it until then (its buffer must not be reused under it), and a pooled result it returns
    late is released, since nobody will take it."""
    loop = asyncio.get_running_loop()
    if isinstance(item, Leased):
        item.retain()
        future.add_done_callback(release_later(loop, item))
    future.add_done_callback(functools.partial(_drop_result, loop, item))


def _drop_result(loop: asyncio.AbstractEventLoop, item: Any, future: Future[Any]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    result = future.result()
    inputs = item.items if isinstance(item, Batch) else (item,)
    for out in result if isinstance(item, Batch) and isinstance(result, list) else (result,):
        if isinstance(out, Leased) and not any(out is i for i in inputs):
            release_later(loop, out)(None)


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
