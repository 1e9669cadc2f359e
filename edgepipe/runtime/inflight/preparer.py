"""The preparing side of a node with calls in flight (:mod:`edgepipe.runtime.inflight.steps`).

Items are taken in arrival order across the node's lanes (a lane at its hold left alone) and
prepared on the node's thread, several in one hop: a hop to a thread and back costs 150-200
CPU-µs and, on cores that decoders and model runs keep busy, milliseconds of waiting for the
thread to be scheduled; eight cameras' 240 frames a second, prepared one hop each, kept their
lanes full and every frame a quarter of a second late. A batch is what is waiting now, up to
:data:`BATCH`; the thread prepares its items in order and stops after as many calls (items that
are not light) as the calls in flight allow to be given: the rest wait, already taken, for the
next hop, so that no more input buffers are filled than the calls in flight (and one behind
them) read. A node that defers calls it cannot be given (``defers_calls``: a detector keeping
up with live cameras carries the frame, and runs the model on its camera's next) is prepared on
while its calls are busy: carried frames of other cameras do not wait for a call to end. One
live lane is prepared an item at a time, just in time (see the module above).

Leases: an item is released once prepared unless its prepared form is the item itself; a
failed one at once; a batch abandoned at the node's deadline keeps its items leased until its
thread returns, and what the thread prepared late is released then.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from edgepipe.core.channel import Policy
from edgepipe.core.errors import EndOfStream
from edgepipe.core.lease import Batch, Leased
from edgepipe.core.markers import EMPTY
from edgepipe.core.spans import PREPARE
from edgepipe.runtime.inflight.flight import RECHECK_S, Flight
from edgepipe.runtime.parts import NodeParts

_clock = time.perf_counter_ns
BATCH = 16
"""Items prepared in one hop at most (what waits beyond them is taken at the next)."""
_LEAD_NS = 2_000_000
"""Slack when timing a just-in-time preparation: thread wake-ups, the event loop's turn."""
_SPREAD_LEAD = 3.0
"""Start that many mean deviations of the processing time earlier still: a model whose runs
vary must not finish before the next input is ready (measured with CenterFace, ~70 ms a run and
a few ms of jitter: with a 2 ms lead alone it waited ~2 ms a run for its input; with the
spread counted, ~0.2 ms)."""


class _Failed:
    """What ``prepare()`` raised for one item of a batch."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


async def run_preparer(node: NodeParts, prepare: Callable[[Any], Any] | None, flight: Flight) -> None:
    """Take, prepare and submit the node's items until its inbox ends."""
    inbox = node.inbox
    assert inbox is not None
    # Live when the one lane keeps only the newest (a camera): its items are prepared just in
    # time. Several lanes are prepared as they come (see the module docstring).
    live = len(inbox.channels) == 1 and inbox.channels[0].policy is Policy.LATEST
    code = node.spec.target
    backlog: deque[tuple[str, Any]] = deque()
    while True:
        defers = prepare is not None and bool(getattr(code, "defers_calls", False))
        while not defers and not flight.room():  # the calls allowed running and one waiting
            await flight.preparer_wait()
        if live:
            await _until_needed(flight)
        limit = 1 if live else (BATCH if prepare is not None else flight.calls_room())
        try:
            batch = await _take(node, flight, backlog, limit)
        except EndOfStream:
            flight.end()
            return
        if prepare is None:
            for lane, item in batch:
                flight.submit(lane, item)
            continue
        ready = await _prepare(node, prepare, batch, defers, flight)
        if ready is None:  # the hop failed as a whole: its items go back as its thread returns
            continue
        for (lane, item), prepared in zip(batch, ready, strict=False):
            if isinstance(prepared, _Failed):
                if isinstance(item, Leased):
                    item.release()
                await node.circuit.failed(prepared.error, restart_hooks=False)
                continue
            if prepared is not item and isinstance(item, Leased):
                item.release()
            flight.submit(lane, prepared)
        backlog.extend(batch[len(ready) :])


async def _take(
    node: NodeParts, flight: Flight, backlog: deque[tuple[str, Any]], limit: int
) -> list[tuple[str, Any]]:
    """Up to ``limit`` items, (lane, item): those already taken first, then what the inbox holds
    of lanes not at their hold; waits for one when there is none. Raises :class:`EndOfStream`
    once the inbox has ended and nothing is left."""
    inbox = node.inbox
    assert inbox is not None
    circuit = node.circuit
    batch = [backlog.popleft() for _ in range(min(limit, len(backlog)))]
    taken = Counter(lane for lane, _ in batch) + Counter(lane for lane, _ in backlog)
    while len(batch) < limit:
        try:
            item = inbox.get_nowait(flight.paused(taken))
        except EndOfStream:
            if batch or backlog:
                break
            raise
        if item is EMPTY:
            if batch:
                break
            # Until an item comes (the inbox's getters) or a job leaves (a lane has room again).
            await flight.preparer_wait(inbox.getters)
            continue
        if circuit.failures and not await circuit.admit(item):
            continue
        batch.append((inbox.lane, item))
        taken[inbox.lane] += 1
    return batch


async def _until_needed(flight: Flight) -> None:
    """Wait until a thread is expected to need the next input within about one preparation
    (and the jitter of the calls)."""
    while True:
        lead = flight.prepare_ns * 1.5 + flight.process_spread_ns * _SPREAD_LEAD + _LEAD_NS
        wait = flight.expected_free_ns() - lead
        if wait <= 0:
            return
        await flight.preparer_wait(timeout_ns=min(wait, RECHECK_S * 1e9))  # a call may be let start sooner


async def _prepare(
    node: NodeParts, prepare: Callable[[Any], Any], batch: list[tuple[str, Any]], defers: bool, flight: Flight
) -> list[Any] | None:
    """``prepare()`` each item of ``batch`` in order, in one hop to the node's thread: their
    prepared forms (a :class:`_Failed` for each that raised), the first ones of ``batch``. It
    stops once as many need a call as the flight can take now, unless the node ``defers``
    calls it cannot be given (it reads :attr:`CallLimit.free`), and then at the first call past
    them. None when the hop failed as a whole (past the deadline: counted once, and every item
    of it released as its thread returns)."""
    light = flight.light_path
    held = Batch([item for _, item in batch])
    calls = node.context.calls
    calls.free = flight.calls_free()
    room = flight.calls_room()

    def prepare_each(items: Batch) -> list[Any]:
        nonlocal room
        out: list[Any] = []
        for item in items.items:
            try:
                prepared = prepare(item)
            except Exception as exc:
                out.append(_Failed(exc))
                continue
            out.append(prepared)
            if not (light and getattr(prepared, "light", False)):
                calls.free -= 1
                room -= 1
                if room < 0 or (room == 0 and not defers):
                    break
        return out

    t0 = _clock()
    try:
        ready: list[Any] = await node.call_thread(prepare_each, held, node.spec.timeout_s)
    except Exception as exc:  # past its deadline: abandoned, its items leased until it returns
        node.metrics.busy_ns += _clock() - t0
        held.release()
        await node.circuit.failed(exc, restart_hooks=False)
        return None
    except BaseException:  # cancelled: the abandoned call holds its own lease on the items
        held.release()
        raise
    held.items = []  # the references go on, item by item
    held.release()
    elapsed = _clock() - t0
    if node.metrics.spans is not None:
        node.metrics.spans.add(PREPARE, t0, t0 + elapsed)
    node.metrics.busy_ns += elapsed  # the node's busy time is every step's (it may pass 1)
    if ready:
        flight.prepare_ns = _mean(flight.prepare_ns, elapsed / len(ready))
    return ready


def _mean(mean: float, sample: float) -> float:
    return sample if mean == 0.0 else mean * 0.8 + sample * 0.2
