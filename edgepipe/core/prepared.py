"""Two-step stages: ``prepare(item)`` for the next item runs while ``process()`` runs the last.

A stage object with both ``prepare(item)`` and ``process(prepared)`` (sync, so each runs on a
worker thread) declares that its work splits into a cheap CPU step (a detector's colour
conversion into its input tensor) and a long one (the model run, perhaps on an NPU). Run one
after the other, the long step waits for the cheap one on every item; overlapped, the long step
starts again as soon as it finishes, on an input already prepared: double buffering.

The overlap is two deep and no deeper: one item prepared and waiting, one being processed. It
applies to nodes with one input lane and the ``skip``/``stop`` policies (``restart`` cycles the
hooks between the steps, so the two run back to back in one call there, as on several lanes).

- A ``block`` lane (lossless): the next item is prepared as soon as the last one is taken.
- A ``latest`` lane (live video): the newest item is prepared just in time — when the processor
  is expected to finish within about one preparation (running means of both steps) — so that
  the model gets a fresh frame and frames nobody will process are not prepared. If a newer item
  arrives while the prepared one waits and there is still time to prepare it, it replaces the
  waiting one (counted as ``replaced``). A processor that is idle never waits for a newer one.

Leases: the input of ``prepare()`` is released when it returns (keep it by retaining it inside
the prepared item, as Detector does); a prepared item that is itself
:class:`~edgepipe.core.lease.Leased` is released after ``process()``, like any input.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from edgepipe.core.adapt import ProcessAdapter
from edgepipe.core.channel import Policy
from edgepipe.core.errors import EndOfStream
from edgepipe.core.inbox import Inbox
from edgepipe.core.lease import Leased, hand_on
from edgepipe.core.markers import EMPTY, END
from edgepipe.core.parts import NodeParts
from edgepipe.core.spec import NodeKind, OnError

_clock = time.perf_counter_ns
_LEAD_NS = 2_000_000
"""Slack when timing a just-in-time preparation: thread wake-ups, a slower frame."""


def overlaps(node: NodeParts, process: ProcessAdapter) -> bool:
    """Whether the node's two steps run overlapped (see the module docstring)."""
    inbox = node.inbox
    return (
        process.prepare is not None
        and process.mode == "thread"
        and process.process_batch is None
        and inbox is not None
        and len(inbox.channels) == 1
        and node.spec.on_error.action is not OnError.RESTART
    )


def composed(prepare: Callable[[Any], Any], process: Callable[..., Any]) -> Callable[..., Any]:
    """Both steps as one call (one thread hop), for nodes that do not overlap them. A lane, if
    given, goes to ``process``."""

    def call(item: Any, *lane: str) -> Any:
        prepared = prepare(item)
        out = None
        try:
            out = process(prepared, *lane)
            return out
        finally:  # the prepared item is this call's own: released here, as the runtime would
            if out is not prepared and prepared is not item and isinstance(prepared, Leased):
                prepared.release()

    return call


class _Slot:
    """The prepared item waiting for the processor, and what the preparer knows of it. Each
    side waits on a future of its own, woken by the other."""

    __slots__ = ("_for_preparer", "_for_processor", "item", "prepare_ns", "process_ns", "started_ns")

    def __init__(self) -> None:
        self.item: Any = EMPTY
        self._for_processor: asyncio.Future[None] | None = None
        self._for_preparer: asyncio.Future[None] | None = None
        self.started_ns = 0
        """When the processor took its current item; 0 while it has none."""
        self.process_ns = 0.0
        self.prepare_ns = 0.0
        """Running means of the two steps."""

    def put(self, item: Any) -> None:
        """Preparer: hand an item over."""
        self.item = item
        _wake(self._for_processor)

    def take(self) -> Any:
        """Processor: take the item (the preparer is told)."""
        item, self.item = self.item, EMPTY
        self.started_ns = _clock()
        _wake(self._for_preparer)
        return item

    def take_back(self) -> Any:
        """Preparer: withdraw the waiting item (to replace it), or clean up at the end."""
        item, self.item = self.item, EMPTY
        return item

    def finished(self, elapsed_ns: int | None) -> None:
        """Processor: done with its item (``elapsed_ns`` of a completed call, for the mean)."""
        self.started_ns = 0
        if elapsed_ns is not None:
            self.process_ns = _mean(self.process_ns, elapsed_ns)
        _wake(self._for_preparer)

    async def item_ready(self) -> None:
        """Processor: wait until there is an item."""
        while self.item is EMPTY:
            fut = self._for_processor = asyncio.get_running_loop().create_future()
            try:
                await fut
            finally:
                self._for_processor = None

    async def preparer_wait(self, inbox: Inbox | None = None, timeout_ns: float | None = None) -> None:
        """Preparer: wait for the processor to take or finish (or, with ``inbox``, for an item
        to arrive there; with ``timeout_ns``, at most that long)."""
        fut = self._for_preparer = asyncio.get_running_loop().create_future()
        if inbox is not None:
            inbox.getters.append(fut)
        try:
            if timeout_ns is None:
                await fut
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout_ns / 1e9):
                        await fut
        finally:
            self._for_preparer = None
            if inbox is not None:
                with contextlib.suppress(ValueError):
                    inbox.getters.remove(fut)

    def remaining_ns(self) -> float:
        """How long the processor is expected to take still (0 when it is waiting)."""
        if not self.started_ns:
            return 0.0
        return self.process_ns - (_clock() - self.started_ns)


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


def _mean(mean: float, sample: int) -> float:
    return sample if mean == 0.0 else mean * 0.8 + sample * 0.2


async def run_prepared(node: NodeParts, prepare: Callable[[Any], Any], process: Callable[[Any], Any]) -> None:
    """The node's loop with ``prepare`` overlapped with ``process``. Returns at end of input."""
    slot = _Slot()
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_preparer(node, prepare, slot))
            group.create_task(_processor(node, process, slot))
    except BaseExceptionGroup as group_error:
        # One side failed (its error policy said stop) and the other was cancelled: the node
        # reports that one error, as a node without overlap would.
        cause = next(e for e in group_error.exceptions if not isinstance(e, asyncio.CancelledError))
        raise cause from None
    finally:
        left = slot.take_back()
        if isinstance(left, Leased):
            left.release()


async def _preparer(node: NodeParts, prepare: Callable[[Any], Any], slot: _Slot) -> None:
    inbox = node.inbox
    assert inbox is not None
    lane = inbox.channels[0]
    live = lane.policy is Policy.LATEST
    while True:
        if live:
            await _until_needed(slot)
        try:
            item = await inbox.get()
        except EndOfStream:
            while slot.item is not EMPTY:
                await slot.preparer_wait()
            slot.put(END)
            return
        prepared = await _prepare(node, prepare, item, slot)
        if prepared is EMPTY:
            continue
        slot.put(prepared)
        watch = live  # a newer input may replace this one while there is time to prepare it
        while slot.item is not EMPTY:  # two deep, no deeper: wait until it is taken
            await slot.preparer_wait(inbox if watch else None)
            if slot.item is EMPTY or not lane.queue:
                continue
            if slot.remaining_ns() < slot.prepare_ns:
                watch = False  # no time: the model would wait for the newer one
                continue
            stale = slot.take_back()
            if isinstance(stale, Leased):
                stale.release()
            node.metrics.replaced += 1
            prepared = await _prepare(node, prepare, inbox.get_nowait(), slot)
            if prepared is not EMPTY:
                slot.put(prepared)


async def _until_needed(slot: _Slot) -> None:
    """Wait until the processor is expected to need the next input within one preparation."""
    while True:
        wait = slot.remaining_ns() - slot.prepare_ns * 1.5 - _LEAD_NS
        if wait <= 0:
            return
        await slot.preparer_wait(timeout_ns=wait)


async def _prepare(node: NodeParts, prepare: Callable[[Any], Any], item: Any, slot: _Slot) -> Any:
    """``prepare(item)`` on the node's thread; :data:`EMPTY` when it failed or was skipped."""
    circuit = node.circuit
    if circuit.failures and not await circuit.admit(item):
        return EMPTY
    t0 = _clock()
    try:
        prepared = await node.call_thread(prepare, item, node.spec.timeout_s)
    except Exception as exc:
        if isinstance(item, Leased):
            item.release()
        await circuit.failed(exc, restart_hooks=False)
        return EMPTY
    except BaseException:  # cancelled: the abandoned call holds its own lease on the item
        if isinstance(item, Leased):
            item.release()
        raise
    slot.prepare_ns = _mean(slot.prepare_ns, _clock() - t0)
    if prepared is not item and isinstance(item, Leased):
        item.release()
    return prepared


async def _processor(node: NodeParts, process: Callable[[Any], Any], slot: _Slot) -> None:
    timeout_s = node.spec.timeout_s
    stage = node.spec.kind is NodeKind.STAGE
    circuit = node.circuit
    m = node.metrics
    while True:
        await slot.item_ready()
        prepared = slot.take()
        if prepared is END:
            return
        t0 = _clock()
        try:
            out = await node.call_thread(process, prepared, timeout_s)
        except Exception as exc:
            slot.finished(None)
            if isinstance(prepared, Leased):
                prepared.release()
            await circuit.failed(exc, restart_hooks=False)
            continue
        except BaseException:
            if isinstance(prepared, Leased):
                prepared.release()
            raise
        elapsed = _clock() - t0
        slot.finished(elapsed)
        m.record(elapsed)
        if circuit.failures:
            await circuit.succeeded()
        if hand_on(prepared, out, stage):
            await node.outputs.emit(out)
