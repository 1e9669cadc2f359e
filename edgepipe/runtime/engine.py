"""Running a validated graph: one TaskGroup, orderly start, draining shutdown.

Life of a run:

1. Every node's task starts and runs its ``start()`` hook; sources wait until every node has
   started (a slow model load does not make the first frames pile up).
2. Items flow until the sources end, or :meth:`Runtime.request_stop` (SIGINT, SIGTERM,
   ``--duration``).
3. Stopping cancels the sources only; everything already in the channels drains through to the
   sinks within ``drain_timeout_s``. Past that, or on :meth:`Runtime.force_stop` (a second
   Ctrl-C), every remaining task is cancelled. Stop hooks and the results left to write are
   bounded too (:mod:`~edgepipe.runtime.deadlines`): the whole stop fits in the drain deadline + 1 s.
   Nodes see the stop (``current_node().stopping``): one that makes long work of its own (a
   language model's description) starts no more and cuts short what it has under way, so the
   drain is the queued items' work only.
4. A node whose error policy says stop raises :class:`NodeError`: the TaskGroup cancels the rest
   and :meth:`Runtime.run` re-raises that error, naming the node.
5. The report names every sink that was given items and wrote none of them
   (:attr:`RunReport.failed_sinks`): every call failed, or the sink says its output was lost
   as a whole (a ``failed_output`` attribute on its object, e.g. a recording whose file could
   not be closed; a stage that writes files, such as event clips, may say it too). The CLI
   exits 1 for them, as for results that could not be written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from edgepipe.core.channel import ChannelStats
from edgepipe.core.errors import first_failure
from edgepipe.core.executor import Resources
from edgepipe.core.scope import RunScope, context_of, entered
from edgepipe.core.spans import SPANS, SpanRecorder
from edgepipe.graph.check import Graph
from edgepipe.graph.spec import NodeKind
from edgepipe.planning.memory import PLAN, MemoryPlan
from edgepipe.runtime.deadlines import StopDeadlines
from edgepipe.runtime.metrics import NodeStats
from edgepipe.runtime.node import NodeRunner
from edgepipe.wire.redact import redact
from edgepipe.wire.results import Message, ResultsWriter

log = logging.getLogger(__name__)

Watcher = Callable[["Runtime"], Coroutine[Any, Any, None]]
"""A coroutine function run beside the nodes (a stats table, a health file); cancelled when the
nodes are done."""


class Scheduler(Protocol):
    """What governs a run's CPU (:class:`edgepipe.sched.Scheduler`; the core only runs it)."""

    def own(self, scope: RunScope) -> None:
        """Put what it owns (CPU budget, gate) in the run's scope, before any node starts."""
        ...

    async def run(self, runtime: Runtime) -> None:
        """Measure and govern until cancelled (started beside the nodes)."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """Its figures, as plain data."""
        ...


@dataclass(frozen=True)
class Snapshot:
    """Every node's and channel's counters at one moment."""

    t_s: float
    """Seconds since the run started."""
    nodes: tuple[NodeStats, ...]
    channels: tuple[ChannelStats, ...]
    """Every input lane of every node."""
    sched: dict[str, Any] | None = None
    """The scheduler's figures (CPU, budget, governor, overlap); None when ungoverned by one."""
    memory: dict[str, Any] | None = None
    """The run's memory plan (:meth:`~edgepipe.planning.memory.MemoryPlan.as_data`)."""

    def node(self, node_id: str) -> NodeStats:
        return next(n for n in self.nodes if n.node_id == node_id)

    def inbox(self, node_id: str) -> tuple[ChannelStats, ...]:
        """The lanes of one node's inbox."""
        return tuple(c for c in self.channels if c.consumer == node_id)

    def channel(self, consumer: str, lane: str | None = None) -> ChannelStats:
        """One lane of ``consumer``'s inbox (its only one when ``lane`` is not given)."""
        lanes = self.inbox(consumer)
        if lane is None:
            if len(lanes) != 1:
                raise KeyError(f"node '{consumer}' has {len(lanes)} lanes; name one")
            return lanes[0]
        return next(c for c in lanes if c.name == lane)


@dataclass(frozen=True)
class RunReport:
    """How a run ended, with the final counters."""

    stopped_by: str
    """``end`` (sources finished), ``stop`` (requested) or ``forced`` (drain deadline passed)."""
    duration_s: float
    stats: Snapshot
    results_written: int
    """Lines written to ``--results`` (0 without it)."""
    results_error: str | None = None
    """Why some results could not be written (then ``results_lost`` of them were dropped)."""
    results_lost: int = 0
    failed_sinks: tuple[str, ...] = ()
    """One line per sink that was given items and wrote none of them, naming it and why."""
    results_reader_gone: bool = False
    """``--results -``: standard output's reader closed it, which stopped the run (not an
    error: the ``head`` convention)."""

    @property
    def output_failed(self) -> bool:
        """Results could not be written or a sink wrote nothing it was given: exit code 1."""
        return self.results_error is not None or bool(self.failed_sinks)


class Runtime:
    """Runs one :class:`Graph` once. Not reusable: build a new one per run."""

    def __init__(
        self,
        graph: Graph,
        *,
        results: ResultsWriter | None = None,
        drain_timeout_s: float = 5.0,
        stop_timeout_s: float = 5.0,
        workers: dict[str, int] | None = None,
        debug: bool = False,
        scheduler: Scheduler | None = None,
        memory: MemoryPlan | None = None,
        spans: SpanRecorder | None = None,
    ) -> None:
        """``memory``: the run's plan (default: :meth:`MemoryPlan.for_run`); ``spans``: where
        every call of every node is recorded (``edgepipe trace``)."""
        self.graph = graph
        self.scheduler = scheduler
        self.scope = RunScope(graph.name)
        """What its nodes' code reaches through :mod:`edgepipe.core.scope` (plan, budget, gate)."""
        self.memory = self.scope.put(PLAN, memory if memory is not None else MemoryPlan.for_run())
        self.scope.put(SPANS, spans)  # the models loaded for a traced run profile for it
        if scheduler is not None:
            scheduler.own(self.scope)
        # The run's threads work for it: its pools run them in a context holding its scope.
        context = context_of(self.scope)
        self._results = results
        if results is not None:
            results.on_reader_gone = self.request_stop
        self._listeners: list[Callable[[Message], None]] = []
        self.drain_timeout_s = drain_timeout_s
        self.stop_timeout_s = stop_timeout_s
        """Each node's stop() hook gets this long at most (sinks flush there); after a stop, no
        longer than the drain deadline allows (:meth:`hook_timeout_s`)."""
        self.debug = debug
        self.resources = Resources({**graph.workers(), **(workers or {})}, context=context)
        # Hooks get threads of their own: a stop() must not queue behind the blocking read it is
        # there to interrupt.
        hooks = Resources({"hooks": len(graph.nodes)}, context=context).executor("hooks")
        self._hooks_pool = hooks
        logs = {spec.node_id: spans.log_for(spec.node_id) for spec in graph.nodes} if spans else {}
        self.runners = {
            spec.node_id: NodeRunner(
                spec, self, self.resources.executor(spec.resource), hooks, logs.get(spec.node_id)
            )
            for spec in graph.nodes
        }
        for producer_id, consumer_ids in graph.consumers.items():
            for consumer_id in consumer_ids:
                self.runners[producer_id].connect(self.runners[consumer_id])
        self.all_started = asyncio.Event()
        self.stop_requested = asyncio.Event()
        """Set by the first stop request: nodes see it as ``current_node().stopping``."""
        self._started = 0
        self._running = len(self.runners)
        self._changed = asyncio.Event()
        self._done = asyncio.Event()
        self._stopping = False
        self._forced = False
        self._force_count = 0
        self._force_seen = 0
        self._t0 = 0.0
        self._deadlines = StopDeadlines(drain_timeout_s, stop_timeout_s)
        self._opening: asyncio.Timeout | None = None
        """While ``--results`` opens: a stop cuts it short (a FIFO's open waits for a reader)."""

    # -- control ------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop the sources and let what is queued drain. Safe to call from a signal handler."""
        self._stop_requested()
        self._changed.set()

    def force_stop(self) -> None:
        """Cancel every node now (a node in its stop() hook may finish it; asked again, not)."""
        self._stop_requested()
        self._force_count += 1
        self._forced = True
        self._changed.set()

    def _stop_requested(self) -> None:
        self._stopping = True
        self.stop_requested.set()
        self._deadlines.request()
        if self._opening is not None:
            self._opening.reschedule(0)  # now

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def results(self) -> ResultsWriter | None:
        """Where results are recorded (``--results``), if anywhere."""
        return self._results

    def snapshot(self) -> Snapshot:
        return Snapshot(
            t_s=time.monotonic() - self._t0 if self._t0 else 0.0,
            nodes=tuple(r.snapshot() for r in self.runners.values()),
            channels=tuple(
                c.stats() for r in self.runners.values() if r.inbox is not None for c in r.inbox.channels
            ),
            sched=self.scheduler.snapshot() if self.scheduler is not None else None,
            memory=self.memory.as_data(),
        )

    # -- called by node runners ---------------------------------------------------------------

    def node_started(self, runner: NodeRunner) -> None:
        self._started += 1
        if self._started == len(self.runners):
            self.all_started.set()
            self.memory.announce()

    def node_finished(self, runner: NodeRunner) -> None:
        self._running -= 1
        if self._running == 0:
            self._done.set()
            self._changed.set()

    def hook_timeout_s(self) -> float:
        """How long a node's stop() hook starting now may take (:mod:`~edgepipe.runtime.deadlines`)."""
        return self._deadlines.hook_s()

    def add_listener(self, listener: Callable[[Message], None]) -> None:
        """Tell ``listener`` of every runtime event (a source's state, a node's error or
        restart) as it happens, on the event loop. It must not block; what it raises is logged
        once and the listener dropped (the WebRTC viewers listen: :mod:`edgepipe.serve`)."""
        self._listeners.append(listener)

    async def emit_event(self, node_id: str, kind: str, data: Any) -> None:
        """Record a runtime event (error, restart) in the results, if they are being written,
        and tell the listeners."""
        # an error's text may quote a source's URL: no listener (a viewer) or result sees its password
        message = Message(kind=kind, data=redact(data), node=node_id)
        for listener in list(self._listeners):
            try:
                listener(message)
            except Exception:
                log.exception("a listener of runtime events failed; it hears no more")
                self._listeners.remove(listener)
        if self._results is not None:
            await self._results.write(message, node_id)

    # -- the run ------------------------------------------------------------------------------

    async def run(self, watchers: Sequence[Watcher] = ()) -> RunReport:
        """Run to the end. Raises :class:`NodeError` if a node's policy stopped the pipeline."""
        with entered(self.scope):
            return await self._run(watchers)

    async def _run(self, watchers: Sequence[Watcher]) -> RunReport:
        self._t0 = time.monotonic()
        self.memory.announced = False  # logged whole once this run has started, then by change
        results = self._results
        opened = results is None or await self._opened(results)
        for warning in self.graph.warnings:
            log.warning("%s", warning)
        failure: BaseException | None = None
        try:
            if opened:  # else stopped before --results could be opened: nothing ran
                await self._run_tasks(watchers)
        except BaseExceptionGroup as group:
            failure = first_failure(group)
        finally:
            self.resources.shutdown()
            self._hooks_pool.shutdown(wait=False, cancel_futures=True)
            if results is not None:
                await results.close(self._deadlines.results_s())
        if failure is not None:
            raise failure
        return self._report()

    async def _run_tasks(self, watchers: Sequence[Watcher]) -> None:
        results = self._results
        async with asyncio.TaskGroup() as tg:
            for runner in self.runners.values():
                runner.task = tg.create_task(runner.run(), name=f"node:{runner.node_id}")
            watcher_tasks = [tg.create_task(w(self), name=f"watcher:{i}") for i, w in enumerate(watchers)]
            if self.scheduler is not None:
                watcher_tasks.append(tg.create_task(self.scheduler.run(self), name="scheduler"))
            if results is not None:  # cancelled with the watchers: close() writes the rest
                flushing = tg.create_task(results.flush_every(0.5, self._done), name="results-flush")
                watcher_tasks.append(flushing)
            tg.create_task(self._supervise(watcher_tasks), name="supervisor")

    async def _opened(self, results: ResultsWriter) -> bool:
        """Open ``--results``; False when a stop comes first (opening a FIFO waits for its
        reader: that open is abandoned to its thread)."""
        if self._stopping:
            return False
        try:
            async with asyncio.timeout(None) as self._opening:
                await results.open()
        except TimeoutError:
            if self._opening is None or not self._opening.expired():
                raise
            log.info("stopped while opening %s for the results", results.path)
            return False
        finally:
            self._opening = None
        return True

    def _report(self) -> RunReport:
        stopped_by = "forced" if self._forced else ("stop" if self._stopping else "end")
        stats = self.snapshot()
        results = self._results
        return RunReport(
            stopped_by=stopped_by,
            duration_s=time.monotonic() - self._t0,
            stats=stats,
            results_written=results.written if results is not None else 0,
            results_error=results.error if results is not None else None,
            results_lost=results.lost if results is not None else 0,
            failed_sinks=tuple(self._failed_sinks(stats)),
            results_reader_gone=results.reader_gone if results is not None else False,
        )

    def _failed_sinks(self, stats: Snapshot) -> list[str]:
        failed = []
        for runner in self.runners.values():
            # A stage may write output of its own too (event clips): its failed_output counts.
            own = getattr(runner.spec.target, "failed_output", None)
            if isinstance(own, str) and own:
                failed.append(f"sink '{runner.node_id}': {own}")
                continue
            if runner.spec.kind is not NodeKind.SINK:
                continue
            s = stats.node(runner.node_id)
            tried = s.items_in - s.skipped
            if s.items_in and s.errors and s.errors >= tried:
                skipped = f"; {s.skipped} more skipped while its circuit was open" if s.skipped else ""
                failed.append(
                    f"sink '{runner.node_id}': every write failed ({s.errors} of {tried}{skipped}); "
                    "nothing it was given was written (errors logged above)"
                )
        return failed

    async def _supervise(self, watchers: list[asyncio.Task[None]]) -> None:
        loop = asyncio.get_running_loop()
        sources_cancelled = False
        drain_timer: asyncio.TimerHandle | None = None
        while not self._done.is_set():
            await self._changed.wait()
            self._changed.clear()
            if self._done.is_set():
                break
            if self._forced and self._force_count > self._force_seen:
                self._force_seen = self._force_count
                spare_hooks = self._force_count == 1
                log.warning("stopping now: cancelling %d running node(s)", self._running)
                for runner in self.runners.values():
                    spared = spare_hooks and runner.in_stop_hook
                    if runner.task is not None and not runner.task.done() and not spared:
                        runner.task.cancel()
            elif self._stopping and not sources_cancelled:
                sources_cancelled = True
                log.info("stopping: sources closed, draining for up to %.1f s", self.drain_timeout_s)
                for runner in self.runners.values():
                    if runner.spec.kind is NodeKind.SOURCE and runner.task is not None:
                        runner.task.cancel()
                drain_timer = loop.call_later(self.drain_timeout_s, self._drain_expired)
        if drain_timer is not None:
            drain_timer.cancel()
        for task in watchers:
            task.cancel()

    def _drain_expired(self) -> None:
        if not self._done.is_set():
            log.warning("drain did not finish within %.1f s", self.drain_timeout_s)
            self.force_stop()
