"""Micro-batching: one call for the items already waiting in a node's inbox.

A stage object with ``process_batch(items) -> outputs`` (sync, one output or None per item, in
order) and a ``batch_size`` above 1 is called with up to ``batch_size`` items at once: the one
it waited for plus those already queued behind it (across its lanes, in arrival order). It
never waits for a batch to fill, so batching adds no latency: under light load every call has
one item, and when several cameras feed one detector faster than it runs, their frames queue up
and go through the model together (an accelerator runs a batch of four in far less than four
times one).

If the object also has ``prepare(item)``, each item is prepared in the same call before the
batch is processed, and with ``finish(result)`` each output is finished after it, in order; a
prepared item (or output) that is :class:`~edgepipe.core.lease.Leased` is released after the
step that takes it, unless that step returned it. Inputs are released after the call unless
returned. A failure of the call counts once and skips the whole batch; ``timeout_s`` bounds the
whole call.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from edgepipe.core.errors import EndOfStream
from edgepipe.core.lease import Batch, Leased, hand_on
from edgepipe.core.markers import EMPTY
from edgepipe.core.spans import CALL
from edgepipe.graph.spec import NodeKind
from edgepipe.runtime.parts import NodeParts


def batch_call(
    process_batch: Callable[[list[Any]], Sequence[Any]],
    prepare: Callable[[Any], Any] | None,
    finish: Callable[[Any], Any] | None = None,
) -> Callable[[Batch], list[Any]]:
    """The per-batch call run on the node's executor: prepare each item, then the batch, then
    finish each output in order (:mod:`edgepipe.runtime.inflight.steps` says what the steps are)."""

    def call(batch: Batch) -> list[Any]:
        outputs = processed(batch)
        if finish is None:
            return outputs
        done: list[Any] = []
        try:
            for out in outputs:
                done.append(finish(out))
        finally:  # what process_batch returned goes back unless finish returned it
            for item, out, kept in zip(batch.items, outputs, done + [None] * (len(outputs) - len(done)),
                                       strict=True):  # fmt: skip
                if out is not kept and out is not item and isinstance(out, Leased):
                    out.release()
        return done

    def processed(batch: Batch) -> list[Any]:
        items = batch.items
        prepared: list[Any] = [] if prepare is not None else items
        outputs: list[Any] = []
        try:
            if prepare is not None:
                for item in items:  # one by one: if one fails, those made so far are released
                    prepared.append(prepare(item))
            outputs = list(process_batch(prepared))
        finally:
            if prepare is not None:  # a prepared item returned as an output travels on
                kept = {id(out) for out in outputs}
                for item, ready in zip(items, prepared, strict=False):
                    if ready is not item and id(ready) not in kept and isinstance(ready, Leased):
                        ready.release()
        if len(outputs) != len(items):
            raise ValueError(f"process_batch() returned {len(outputs)} outputs for {len(items)} items")
        return outputs

    return call


async def run_batched(node: NodeParts, call: Callable[[Batch], list[Any]], batch_size: int) -> None:
    """The node's loop, one call per batch of waiting items. Returns at end of input."""
    inbox = node.inbox
    assert inbox is not None
    timeout_s = node.spec.timeout_s
    stage = node.spec.kind is NodeKind.STAGE
    circuit = node.circuit
    m = node.metrics
    while True:
        try:
            batch = [await inbox.get()]
        except EndOfStream:
            return
        with contextlib.suppress(EndOfStream):  # the end is seen again at the next get
            while len(batch) < batch_size:
                item = inbox.get_nowait()
                if item is EMPTY:
                    break
                batch.append(item)
        held = Batch(batch)
        if circuit.failures and not await circuit.admit(held):
            continue
        t0 = time.perf_counter_ns()
        try:
            outputs = await node.call_thread(call, held, timeout_s)
        except Exception as exc:
            m.record(time.perf_counter_ns() - t0)
            held.release()
            await circuit.failed(exc)
            continue
        except BaseException:  # cancelled at shutdown: the call keeps its own lease on the batch
            held.release()
            raise
        t1 = time.perf_counter_ns()
        m.record(t1 - t0)
        if m.spans is not None:
            m.spans.add(CALL, t0, t1)
        held.items = []  # the references go on below, item by item
        held.release()
        emits = [out for item, out in zip(batch, outputs, strict=True) if hand_on(item, out, stage)]
        for i, out in enumerate(emits):
            try:
                await node.outputs.emit(out)
            except BaseException:  # stopped (or every consumer gone): the rest go back
                for rest in emits[i + 1 :]:
                    if isinstance(rest, Leased):
                        rest.release()
                raise
        if circuit.failures:
            await circuit.succeeded()
