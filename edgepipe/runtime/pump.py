"""The loops that move a node's items: a source's, a stage's or sink's per-item loop, a stream
stage's. The hot path of the runtime.

Per item, a stage with one input and one consumer does: take from its lane (no await unless
the inbox is empty), call the code, one clock read (busy time is exact; about one item in
:data:`~edgepipe.runtime.metrics.SAMPLE_STRIDE`, at random, is also timed alone for the latency
percentiles),
offer the result to the consumer's lane (no await unless that is a full ``block`` lane). Nothing
is decided per item that can be decided once per node.

Leases (:mod:`edgepipe.core.lease`): after a call, the input is released unless the call
returned that same item (its reference travels on downstream); a sink's input is always
released. In a stream stage, an input is released when the next one is asked for, unless it
was yielded downstream meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from edgepipe.core.context import CallLimit
from edgepipe.core.errors import EndOfStream, ExitCalled, NodeError, NodeTimeout, error_text
from edgepipe.core.lease import Leased, hand_on
from edgepipe.core.markers import EMPTY
from edgepipe.core.spans import CALL, NEXT_ITEM
from edgepipe.graph.spec import NodeKind, OnError
from edgepipe.runtime.adapt import ProcessAdapter, SourceAdapter
from edgepipe.runtime.batched import batch_call, run_batched
from edgepipe.runtime.calls import call_with_deadline
from edgepipe.runtime.circuit import OPEN
from edgepipe.runtime.inflight.steps import composed, in_flight, run_prepared
from edgepipe.runtime.parts import NodeParts

_clock = time.perf_counter_ns
_YIELD_EVERY = 32
"""A source that never has to wait for room yields to the loop after this many items."""


# -- sources ----------------------------------------------------------------------------------


async def run_source(node: NodeParts, source: SourceAdapter) -> None:
    """Iterate the source until it ends; reopen it by its error policy when it fails."""
    while True:
        try:
            iterator = source.open()
            if hasattr(iterator, "aclose"):
                async with aclosing(iterator):  # type: ignore[type-var]
                    await _pump(node, iterator)
            else:
                await _pump(node, iterator)
            return
        except Exception as exc:
            action = node.spec.on_error.action
            if not source.restartable and action is not OnError.STOP:
                raise NodeError(
                    f"{error_text(exc)} (cannot restart a generator object; pass the generator "
                    "function instead)",
                    node_id=node.node_id,
                ) from exc
            # For a source, "skip" also means "open it again" (an iterator that raised is over),
            # after the same backoff as a restart so that it cannot spin.
            await node.circuit.failed(exc, restart_hooks=action is OnError.RESTART, reopen=True)


async def _pump(node: NodeParts, iterator: AsyncIterator[Any]) -> None:
    timeout_s = node.spec.timeout_s
    if timeout_s is not None:
        await _pump_with_deadline(node, iterator, timeout_s)
        return
    circuit = node.circuit
    m = node.metrics
    outputs = node.outputs
    single = outputs.single
    run = 0
    spans = m.spans
    t_wait = _clock() if spans is not None else 0
    async for item in iterator:
        if spans is not None:  # edgepipe trace: how long the source took to give this item
            t_wait = spans.add_until_now(NEXT_ITEM, t_wait)
        circuit.failures = 0
        if single is None:
            await outputs.emit(item)
        elif single.offer(item):
            m.items_out += 1
        else:
            await outputs.put_single(item)
            m.items_out += 1
            run = 0
        if spans is not None:  # the wait for the next item starts now, not before emitting this one
            t_wait = _clock()
        run += 1
        if run == _YIELD_EVERY:
            # A source that never waits (an in-memory list into a "latest" lane) would otherwise
            # starve its consumers and ignore cancellation.
            run = 0
            await asyncio.sleep(0)


async def _pump_with_deadline(node: NodeParts, iterator: AsyncIterator[Any], timeout_s: float) -> None:
    # timeout_s on a source bounds the wait for its next item: a stalled input is an error for
    # its policy (restart, by default) instead of a silent hang.
    spans = node.metrics.spans
    while True:
        t0 = _clock() if spans is not None else 0
        try:
            async with asyncio.timeout(timeout_s):
                item = await anext(iterator)
            if spans is not None:
                spans.add_until_now(NEXT_ITEM, t0)
        except StopAsyncIteration:
            return
        except TimeoutError as exc:
            raise NodeTimeout(f"no item within timeout_s={timeout_s}", node_id=node.node_id) from exc
        node.circuit.failures = 0
        await node.outputs.emit(item)
        await asyncio.sleep(0)


# -- stages and sinks -------------------------------------------------------------------------


async def run_items(node: NodeParts, process: ProcessAdapter, calls: CallLimit | None = None) -> None:
    """Take, call, emit, until the inbox ends. Picks the loop with calls in flight, or the
    batched one, where the node's code has ``prepare``/``finish``, ``instances`` > 1 or
    ``process_batch`` (see those modules)."""
    inbox = node.inbox
    assert inbox is not None
    spec = node.spec
    if process.process_batch is not None:
        call_batch = batch_call(process.process_batch, process.prepare, process.finish)
        await run_batched(node, call_batch, process.batch_size)
        return
    calls = calls or CallLimit()
    if in_flight(node, process, calls.instances):
        await run_prepared(node, process, calls)
        return
    call = composed(process.prepare, process.call, process.finish)
    inline = process.mode == "inline"
    thread = process.mode == "thread"
    timeout_s = spec.timeout_s
    takes_lane = process.takes_lane
    if takes_lane and not thread:
        with_lane = call
        call = lambda item: with_lane(item, inbox.lane)  # noqa: E731 - read the lane when called
    call_thread = node.call_thread
    node_id = node.node_id
    circuit = node.circuit
    m = node.metrics
    outputs = node.outputs
    single = outputs.single if spec.kind is NodeKind.STAGE else None
    stage = spec.kind is NodeKind.STAGE
    lane = inbox.channels[0] if len(inbox.channels) == 1 else None
    # The fast path skips the inbox: not on a lane with max_age_s, whose items must be aged.
    queue = lane.queue if lane is not None and not lane.max_age_ns else None
    take = lane.take if lane is not None else None
    get_nowait = inbox.get_nowait
    countdown = 1 if thread else m.stride()
    t0 = t_mark = _clock()
    while True:
        if queue:
            item = take()  # type: ignore[misc]
        else:
            try:
                item = get_nowait()
                if item is EMPTY:
                    item = await inbox.get()
                    t_mark = _clock()
            except EndOfStream:
                return
        if circuit.failures:
            admitted = await circuit.admit(item)
            t_mark = _clock()  # a skip, or the hooks restarted for a trial, is not this call
            if not admitted:
                continue
        countdown -= 1
        if countdown == 0:
            t0 = _clock()
        failure = None
        try:
            if inline:
                out = call(item)
            elif thread:
                out = await call_thread(call, item, timeout_s, inbox.lane if takes_lane else None)
            elif timeout_s is None:
                out = await call(item)
            else:
                out = await call_with_deadline(call, item, timeout_s, node_id)
        except Exception as exc:
            failure = exc
        except SystemExit as exc:  # an inline or async function's sys.exit() fails the item
            failure = ExitCalled(exc)
        except BaseException:  # cancelled (a forced stop): our reference goes back
            if isinstance(item, Leased):
                item.release()
            raise
        t = _clock()
        m.busy_ns += t - t_mark  # every call, failed ones too
        if m.spans is not None:
            m.spans.add(CALL, t_mark, t)
        t_mark = t
        if countdown == 0:
            m.sample(t - t0)
            countdown = 1 if thread else m.stride()
        if failure is not None:
            if isinstance(item, Leased):
                item.release()
            await circuit.failed(failure)
            t_mark = _clock()
            continue
        if hand_on(item, out, stage):
            if single is None:
                await outputs.emit(out)
                t_mark = _clock()
            elif single.offer(out):
                m.items_out += 1
            else:
                await outputs.put_single(out)
                m.items_out += 1
                t_mark = _clock()
        if circuit.failures:  # after the output is handed on: nothing is held across this
            await circuit.succeeded()
            t_mark = _clock()


# -- stream stages ----------------------------------------------------------------------------


async def run_stream(node: NodeParts, process: ProcessAdapter) -> None:
    """An async generator function over the input stream; started again on the rest of the
    input after it fails (restart also cycles the hooks).

    Its circuit: an output is a success. Once open, the inbox is drained and skipped for the
    cool-down; then the stream is started again as the trial (half-open), given every item,
    until it yields (closed) or raises (open again, for twice as long).
    """
    circuit = node.circuit
    spans = node.metrics.spans
    while True:
        held = _Held()  # each attempt its own: a dead stream's items are not the next one's
        try:
            async with aclosing(_inbox_items(node, held)) as items, aclosing(process.call(items)) as stream:
                t_wait = _clock() if spans is not None else 0
                async for out in stream:
                    if spans is not None:  # edgepipe trace: how long this output took, input waits too
                        spans.add_until_now(NEXT_ITEM, t_wait)
                    if out is held.item:
                        held.passed = True  # its reference travels downstream
                    await node.outputs.emit(out)
                    if spans is not None:
                        t_wait = _clock()
                    if circuit.failures:
                        await circuit.succeeded()
            return
        except Exception as exc:
            await circuit.failed(exc, restart_hooks=node.spec.on_error.action is OnError.RESTART)
            if not await _skip_while_open(node):
                return
            await asyncio.sleep(0)  # a stream that fails before taking anything must not spin


async def _skip_while_open(node: NodeParts) -> bool:
    """A stream stage's open circuit: take and skip items for the cool-down, then begin the
    trial. False if the input ended meanwhile."""
    inbox = node.inbox
    assert inbox is not None
    circuit = node.circuit
    while (wait_s := circuit.open_for_s()) > 0:
        try:
            async with asyncio.timeout(wait_s):
                item = await inbox.get()
        except TimeoutError:
            continue
        except EndOfStream:
            return False
        circuit.skip(item)
    if circuit.state is OPEN:
        await circuit.begin_trial()
    return True


class _Held:
    """The pooled input a stream stage is working on, released when it asks for the next."""

    __slots__ = ("item", "passed")

    def __init__(self) -> None:
        self.item: Any = None
        self.passed = False

    def release(self) -> None:
        item, self.item = self.item, None
        if item is not None and not self.passed:
            item.release()


async def _inbox_items(node: NodeParts, held: _Held) -> AsyncGenerator[Any, None]:
    inbox = node.inbox
    assert inbox is not None
    context = node.context
    try:
        while True:
            held.release()
            try:
                item = await inbox.get()
            except EndOfStream:
                return
            if isinstance(item, Leased):
                held.item, held.passed = item, False
            context.lane = inbox.lane
            yield item
    finally:
        held.release()
