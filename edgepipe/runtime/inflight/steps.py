"""Nodes with work in flight: a cheap ``prepare`` in order, ``process`` on several threads at
once, a cheap ``finish`` in each lane's order.

A stage (or sink) object may split its work in up to three steps, each optional but
``process``::

    class Faces:
        instances = 2                         # or "auto": the CPU budget chooses (a declaration's
                                              # instances= says otherwise)
        def prepare(self, frame): ...         # in arrival order, one at a time, on a thread:
                                              # cheap, may keep state (which frames the model sees)
        def process(self, prepared): ...      # up to `instances` at once, each on a thread of
                                              # its own: the long step (a model run)
        def finish(self, result): ...         # in each lane's order, one at a time, on the event
                                              # loop: bookkeeping (a tracker), never blocking

- **Overlap.** ``prepare()`` of the next item runs while ``process()`` runs the last ones, and
  one prepared item waits behind the calls under way, so a call starts the moment another ends
  (:mod:`edgepipe.runtime.inflight.flight`): double buffering, ``instances`` deep.
- **Order.** Results leave in the order of each lane's items (a lane is one producer: a
  camera); ``finish()`` sees them in that order. Lanes do not wait for each other.
- **Light items.** A prepared item that says ``light`` (True) in a node with ``finish()`` is not
  given to ``process()``: ``finish()`` takes it as it is, as soon as the items before it in its
  lane have left. A detector's tracked frames are such: a camera's carried boxes never wait
  behind another camera's model run, and follow their own camera's last model run in order.
  They are counted apart from the calls, with their own percentiles (``--stats`` shows them as
  ``carried``, the calls as ``runs``: the table's p50/p95/p99 are the calls' alone).
- **Just in time.** On one ``latest`` lane (a live camera), the next item is taken and prepared
  when a thread is expected to be free within about one preparation and the jitter of the
  calls (running means), so that a call gets a frame at most about that old, and frames no call
  would take are not prepared: meanwhile newer frames replace older ones in the lane (counted
  as its drops). With several lanes items are prepared as they come (bounded as below): a
  light one from another camera must not wait for a thread it does not need. A prepared item is
  never thrown away for a newer one: ``prepare()`` may keep state, and a preparer that hands out
  buffers in turn counts on each prepared item being processed before it makes more than
  ``instances + 1``.
- **Steady output.** A node whose code says ``steady`` has each lane's results leave at the
  rhythm its items came in, one presentation delay after their decoding
  (:mod:`edgepipe.runtime.inflight.present`): a jitter buffer, instead of a lane's results following
  each of its calls in a burst.
- **Bounds.** At most ``instances`` calls run, one prepared item waits, and a lane has at most
  ``instances + 1`` items between ``prepare()`` and leaving: past that the preparer leaves that
  lane alone, and its producer's channel keeps (or drops, by its policy) what comes.

It applies to ``thread``-mode code with the ``skip``/``stop`` policies (``restart`` cycles the
hooks between the steps, so the steps run back to back in one call there, one item at a time).
``process(prepared, lane)`` is given the lane of the item as a plain call is.

Leases: the input of ``prepare()`` is released when it returns (keep it by retaining it inside
the prepared item, as Detector does); a prepared item that is itself
:class:`~edgepipe.core.lease.Leased` is released after ``process()``, unless returned, and
``process()``'s result after ``finish()``, unless returned, like any input.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from edgepipe.core.context import CallLimit
from edgepipe.core.lease import Leased, hand_on
from edgepipe.core.spans import PROCESS
from edgepipe.graph.spec import NodeKind, OnError
from edgepipe.runtime.adapt import ProcessAdapter
from edgepipe.runtime.inflight.flight import Flight
from edgepipe.runtime.inflight.jobs import ABANDONED, FAILED, Job
from edgepipe.runtime.inflight.preparer import run_preparer
from edgepipe.runtime.inflight.present import Presenter
from edgepipe.runtime.parts import NodeParts

_clock = time.perf_counter_ns


def in_flight(node: NodeParts, process: ProcessAdapter, instances: int) -> bool:
    """Whether the node's calls go through :mod:`~edgepipe.runtime.inflight.flight` (see the module
    docstring): it has steps to overlap or several calls to run at once."""
    return (
        process.mode == "thread"
        and process.process_batch is None
        and node.inbox is not None
        and node.spec.on_error.action is not OnError.RESTART
        and (process.prepare is not None or process.finish is not None or instances > 1)
    )


def composed(
    prepare: Callable[[Any], Any] | None, process: Callable[..., Any], finish: Callable[[Any], Any] | None
) -> Callable[..., Any]:
    """The steps as one call (one thread hop), for nodes that do not run them in flight. A
    lane, if given, goes to ``process``. What each step returns is released after the next,
    unless that returned it, as the runtime would."""
    if prepare is None and finish is None:
        return process

    def call(item: Any, *lane: str) -> Any:
        prepared = item if prepare is None else prepare(item)
        out = None
        try:
            out = process(prepared, *lane)
        finally:
            if out is not prepared and prepared is not item and isinstance(prepared, Leased):
                prepared.release()
        if finish is None:
            return out
        done = None
        try:
            done = finish(out)
            return done
        finally:
            if done is not out and out is not item and isinstance(out, Leased):
                out.release()

    return call


async def run_prepared(node: NodeParts, process: ProcessAdapter, calls: CallLimit) -> None:
    """The node's loop with its calls in flight (``calls``: how many, and how many allowed now).
    Returns at end of input."""
    flight = Flight(
        node.node_id, process.call, calls=calls, timeout_s=node.spec.timeout_s,
        takes_lane=process.takes_lane, light_path=process.finish is not None, metrics=node.metrics,
    )  # fmt: skip
    code = node.spec.target
    stage = node.spec.kind is NodeKind.STAGE
    presenter = Presenter(node.outputs.emit) if stage and hasattr(code, "steady") else None
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(run_preparer(node, process.prepare, flight))
            group.create_task(_collector(node, flight, process.finish, presenter))
            if presenter is not None:
                group.create_task(presenter.run())
    except BaseExceptionGroup as group_error:
        # One side failed (its error policy said stop) and the other was cancelled: the node
        # reports that one error, as a node without overlap would.
        cause = next(e for e in group_error.exceptions if not isinstance(e, asyncio.CancelledError))
        raise cause from None
    finally:
        flight.close()
        if presenter is not None:
            presenter.close()


# -- the collector -----------------------------------------------------------------------------


async def _collector(
    node: NodeParts, flight: Flight, finish: Callable[[Any], Any] | None, presenter: Presenter | None
) -> None:
    """Collect the jobs in each lane's order until the preparer has ended and all have left:
    ``finish()`` each, emit (through ``presenter`` when the node may ask for steady output:
    :mod:`~edgepipe.runtime.inflight.present`), and apply the error policy to failures."""
    stage = node.spec.kind is NodeKind.STAGE
    circuit = node.circuit
    m = node.metrics
    code = node.spec.target
    while True:
        job = await flight.next_ready()
        if job is None:
            if presenter is not None:
                presenter.end()
            return
        if job.state is ABANDONED:  # NodeTimeout; NodeStuck, which stops the run
            m.record(flight.abandoned_ns)
            assert job.error is not None
            await circuit.failed(job.error, restart_hooks=False)
            continue
        if job.future is not None:  # a call (light items have none)
            elapsed = flight.measured(job)
            if m.spans is not None:
                m.spans.add(PROCESS, *job.ran_ns)
            m.record(elapsed)
        if job.state is FAILED:
            if isinstance(job.prepared, Leased):
                job.prepared.release()
            assert job.error is not None
            await circuit.failed(job.error, restart_hooks=False)
            continue
        out = job.result
        if finish is not None:
            out, error, took_ns = _finished(node, job, finish)
            if job.future is None and error is None:  # light: its own figures, apart from the calls'
                m.record_light(took_ns)
            if error is not None:
                await circuit.failed(error, restart_hooks=False)
                continue
        if hand_on(job.prepared, out, stage):
            if presenter is None:
                await node.outputs.emit(out)
            else:
                presenter.on = bool(code.steady)
                if job.future is not None:
                    presenter.called(out)
                await presenter.put(job.lane, out)
        if circuit.failures:
            await circuit.succeeded()


def _finished(node: NodeParts, job: Job, finish: Callable[[Any], Any]) -> tuple[Any, Exception | None, int]:
    """``finish(result)`` on the loop, timed: (its output, None, its time in ns), or (None, the
    error, its time) with the job's items released. The result is released unless returned (the
    prepared item is :func:`hand_on`'s to release)."""
    result = job.result
    t0 = _clock()
    out: Any = None
    error: Exception | None = None
    try:
        out = finish(result)
    except Exception as exc:
        error = exc
    took_ns = _clock() - t0
    node.metrics.busy_ns += took_ns
    if out is not result and result is not job.prepared and isinstance(result, Leased):
        result.release()
    if error is not None and isinstance(job.prepared, Leased):
        job.prepared.release()
    return out, error, took_ns
