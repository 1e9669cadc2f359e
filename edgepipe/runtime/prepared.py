"""Two-step stages: ``prepare(item)`` for the next item runs while ``process()`` runs the last.

A stage object with both ``prepare(item)`` and ``process(prepared)`` (sync, so each runs on a
worker thread) declares that its work splits into a cheap CPU step (a detector's colour
conversion into its input tensor) and a long one (the model run, perhaps on an NPU). Run one
after the other, the long step waits for the cheap one on every item; overlapped, the long step
starts again as soon as it finishes, on an input already prepared: double buffering.

The overlap is two deep and no deeper: one item prepared and waiting, one being processed, so a
preparer needs two buffers (plus any still held by a call abandoned at its deadline).
``process()`` runs on a thread of the node's own with the prepared item queued behind the run
in progress (:mod:`edgepipe.runtime.overlap`): the model goes from one run to the next without
waiting for the event loop. It applies to nodes with the ``skip``/``stop`` policies
(``restart`` cycles the hooks between the steps, so the two run back to back in one call there)
and one input lane, or several whose ``process()`` does not ask which lane an item came from
(a detector fed by several cameras: each step then costs the model no more than on one lane).

- A ``block`` lane (lossless): the next item is prepared as soon as the last one has started.
- A ``latest`` lane (live video): the newest item is prepared just in time — when the model is
  expected to finish within about one preparation and the jitter of its runs (running means) —
  so that it gets a frame at most about that old, and frames nobody will process are not
  prepared: until then, newer frames replace older ones in the lane (counted as its drops). A
  model that is idle never waits for a newer one. A prepared item is never thrown away for a
  newer one: ``prepare()`` may keep state (a detector's every-Nth-frame count), and a preparer
  that hands out buffers in turn counts on each prepared item being processed before it makes
  two more.

Leases: the input of ``prepare()`` is released when it returns (keep it by retaining it inside
the prepared item, as Detector does); a prepared item that is itself
:class:`~edgepipe.core.lease.Leased` is released after ``process()``, like any input.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from edgepipe.core.channel import Policy
from edgepipe.core.errors import EndOfStream
from edgepipe.core.lease import Leased
from edgepipe.core.markers import EMPTY
from edgepipe.core.spans import PREPARE
from edgepipe.graph.spec import OnError
from edgepipe.runtime.adapt import ProcessAdapter
from edgepipe.runtime.overlap import Overlap, run_processor
from edgepipe.runtime.parts import NodeParts

_clock = time.perf_counter_ns
_LEAD_NS = 2_000_000
"""Slack when timing a just-in-time preparation: thread wake-ups, the event loop's turn."""
_SPREAD_LEAD = 3.0
"""Start that many mean deviations of the processing time earlier still: a model whose runs
vary must not finish before the next input is ready (measured with CenterFace, ~70 ms a run and
a few ms of jitter: with a 2 ms lead alone it waited ~2 ms a run for its input; with the
spread counted, ~0.2 ms)."""


def overlaps(node: NodeParts, process: ProcessAdapter) -> bool:
    """Whether the node's two steps run overlapped (see the module docstring)."""
    inbox = node.inbox
    return (
        process.prepare is not None
        and process.mode == "thread"
        and process.process_batch is None
        and inbox is not None
        and (len(inbox.channels) == 1 or not process.takes_lane)
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


async def run_prepared(node: NodeParts, prepare: Callable[[Any], Any], process: Callable[[Any], Any]) -> None:
    """The node's loop with ``prepare`` overlapped with ``process``. Returns at end of input."""
    overlap = Overlap(node.node_id, process, node.spec.timeout_s)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_preparer(node, prepare, overlap))
            group.create_task(run_processor(node, overlap))
    except BaseExceptionGroup as group_error:
        # One side failed (its error policy said stop) and the other was cancelled: the node
        # reports that one error, as a node without overlap would.
        cause = next(e for e in group_error.exceptions if not isinstance(e, asyncio.CancelledError))
        raise cause from None
    finally:
        overlap.close()


async def _preparer(node: NodeParts, prepare: Callable[[Any], Any], overlap: Overlap) -> None:
    inbox = node.inbox
    assert inbox is not None
    # Live when every lane keeps only the newest (cameras feeding one detector, each through a
    # ``latest`` lane): inputs are then prepared just in time, whichever lane they come from.
    live = all(lane.policy is Policy.LATEST for lane in inbox.channels)
    while True:
        if live:
            await _until_needed(overlap)
        try:
            item = await inbox.get()
        except EndOfStream:
            overlap.end()
            return
        prepared = await _prepare(node, prepare, item, overlap)
        if prepared is EMPTY:
            continue
        overlap.submit(prepared)
        while overlap.queued():  # two deep, no deeper: wait until it has started
            await overlap.preparer_wait()


async def _until_needed(overlap: Overlap) -> None:
    """Wait until the processing thread is expected to need the next input within about one
    preparation (and the jitter of its runs)."""
    while True:
        lead = overlap.prepare_ns * 1.5 + overlap.process_spread_ns * _SPREAD_LEAD + _LEAD_NS
        wait = overlap.remaining_ns() - lead
        if wait <= 0:
            return
        await overlap.preparer_wait(timeout_ns=wait)


async def _prepare(node: NodeParts, prepare: Callable[[Any], Any], item: Any, overlap: Overlap) -> Any:
    """``prepare(item)`` on the node's thread; :data:`EMPTY` when it failed or was skipped."""
    circuit = node.circuit
    if circuit.failures and not await circuit.admit(item):
        return EMPTY
    t0 = _clock()
    try:
        prepared = await node.call_thread(prepare, item, node.spec.timeout_s)
    except Exception as exc:
        node.metrics.busy_ns += _clock() - t0
        if isinstance(item, Leased):
            item.release()
        await circuit.failed(exc, restart_hooks=False)
        return EMPTY
    except BaseException:  # cancelled: the abandoned call holds its own lease on the item
        if isinstance(item, Leased):
            item.release()
        raise
    elapsed = _clock() - t0
    if node.metrics.spans is not None:
        node.metrics.spans.add(PREPARE, t0, t0 + elapsed)
    node.metrics.busy_ns += elapsed  # the node's busy time is both steps' (it may pass 1)
    overlap.prepare_ns = _mean(overlap.prepare_ns, elapsed)
    if prepared is not item and isinstance(item, Leased):
        item.release()
    return prepared


def _mean(mean: float, sample: float) -> float:
    return sample if mean == 0.0 else mean * 0.8 + sample * 0.2
