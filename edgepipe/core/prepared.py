"""Two-step stages: ``prepare(item)`` for the next item runs while ``process()`` runs the last.

A stage object with both ``prepare(item)`` and ``process(prepared)`` (sync, so each runs on a
worker thread) declares that its work splits into a cheap CPU step (a detector's colour
conversion into its input tensor) and a long one (the model run, perhaps on an NPU). Run one
after the other, the long step waits for the cheap one on every item; overlapped, the long step
starts again as soon as it finishes, on an input already prepared.

The overlap is two deep and no deeper: the preparer hands each prepared item over and waits
until the processing side has *taken* it before it takes the next input. So at most one item is
being prepared while one is processed, which bounds the buffers a preparer needs (two, plus any
still held by a call abandoned at its deadline).

Used only where it cannot change what a node outputs: a ``block`` inbox (lossless) and the
``skip``/``stop`` error policies. A ``latest`` inbox is about freshness, and taking the next
frame early would hold an older frame while newer ones arrive; there, and with ``restart``, the
two steps run back to back in one call, exactly as before.

Leases: the input of ``prepare()`` is released when it returns (keep it by retaining it inside
the prepared item, as Detector does); a prepared item that is itself
:class:`~edgepipe.core.lease.Leased` is released after ``process()``, like any input.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edgepipe.core.errors import EndOfStream
from edgepipe.core.lease import Leased
from edgepipe.core.pipeline import NodeKind

if TYPE_CHECKING:
    from edgepipe.core.node import NodeRunner

_END = object()


def composed(prepare: Callable[[Any], Any], process: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Both steps as one call (one thread hop), for nodes that do not overlap them."""

    def call(item: Any) -> Any:
        prepared = prepare(item)
        out = None
        try:
            out = process(prepared)
            return out
        finally:  # the prepared item is this call's own: released here, as the runtime would
            if out is not prepared and prepared is not item and isinstance(prepared, Leased):
                prepared.release()

    return call


async def run_prepared(
    node: NodeRunner, prepare: Callable[[Any], Any], process: Callable[[Any], Any]
) -> None:
    """The node's loop with ``prepare`` overlapped with ``process``. Returns at end of input."""
    handoff: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_preparer(node, prepare, handoff))
            group.create_task(_processor(node, process, handoff))
    except BaseExceptionGroup as group_error:
        # One side failed (its error policy said stop) and the other was cancelled: the node
        # reports that one error, as a node without overlap would.
        cause = next(e for e in group_error.exceptions if not isinstance(e, asyncio.CancelledError))
        raise cause from None
    finally:
        while not handoff.empty():
            left = handoff.get_nowait()
            if isinstance(left, Leased):
                left.release()


async def _preparer(node: NodeRunner, prepare: Callable[[Any], Any], handoff: asyncio.Queue[Any]) -> None:
    inbox = node.inbox
    assert inbox is not None
    timeout_s = node.spec.timeout_s
    while True:
        try:
            item = await inbox.get()
        except EndOfStream:
            await handoff.put(_END)
            return
        node.metrics.items_in += 1
        try:
            prepared = await node.call_thread(prepare, item, timeout_s)
        except Exception as exc:
            if isinstance(item, Leased):
                item.release()
            await node._failed(exc, restart_hooks=False)
            continue
        except BaseException:  # cancelled: the abandoned call holds its own lease on the item
            if isinstance(item, Leased):
                item.release()
            raise
        if prepared is not item and isinstance(item, Leased):
            item.release()
        await handoff.put(prepared)
        await handoff.join()  # wait until it is taken: two deep, no deeper


async def _processor(node: NodeRunner, process: Callable[[Any], Any], handoff: asyncio.Queue[Any]) -> None:
    timeout_s = node.spec.timeout_s
    emit = node._emit if node.spec.kind is NodeKind.STAGE else None
    m = node.metrics
    while True:
        prepared = await handoff.get()
        handoff.task_done()
        if prepared is _END:
            return
        t0 = time.perf_counter_ns()
        try:
            out = await node.call_thread(process, prepared, timeout_s)
        except Exception as exc:
            if isinstance(prepared, Leased):
                prepared.release()
            await node._failed(exc, restart_hooks=False)
            continue
        except BaseException:
            if isinstance(prepared, Leased):
                prepared.release()
            raise
        m.record(time.perf_counter_ns() - t0)
        node._consecutive_failures = 0
        if out is not prepared and isinstance(prepared, Leased):
            prepared.release()
        if emit is not None and out is not None:
            await emit(out)
        elif out is prepared and isinstance(out, Leased):
            out.release()
