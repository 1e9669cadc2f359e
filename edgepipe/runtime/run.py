"""Running a pipeline from start to finish on the engine: ungoverned unless given a scheduler.

The library runner (:func:`edgepipe.run`, :mod:`edgepipe.runner`) is this plus what ``edgepipe run``
wires around it: the governor, serving, the heartbeat, allocator tuning. Tests that want a
deterministic run call this one (:func:`edgepipe.testing.run_pipeline` does)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from typing import cast

from edgepipe.core.loop import run as run_on_loop
from edgepipe.core.spans import SpanRecorder
from edgepipe.core.units import check_seconds
from edgepipe.graph.pipeline import Graph, Pipeline
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.engine import RunReport, Runtime, Scheduler, Watcher
from edgepipe.runtime.stopsignals import STOP_SIGNALS, after_run, kept_ignored
from edgepipe.wire.results import ResultsWriter

log = logging.getLogger(__name__)


async def run_graph_async(
    pipeline: Pipeline | Graph,
    *,
    duration_s: float | None = None,
    results_path: str | None = None,
    drain_timeout_s: float = 5.0,
    stop_timeout_s: float = 5.0,
    handle_signals: bool = False,
    watchers: Sequence[Watcher] = (),
    workers: dict[str, int] | None = None,
    debug: bool = False,
    scheduler: Scheduler | Callable[[Graph], Scheduler] | None = None,
    memory: MemoryPlan | None = None,
    spans: SpanRecorder | None = None,
) -> RunReport:
    """Validate and run ``pipeline`` on the running loop: the engine alone (what
    :func:`edgepipe.run`, the library runner, wraps with the governor, serving and heartbeat).

    ``duration_s`` stops it (draining) after that long. ``handle_signals`` makes SIGINT,
    SIGTERM and SIGHUP (what a closing ssh session sends) stop it the same way, and a second
    signal cancel everything at once; SIGHUP inherited as ignored (``nohup``) stays ignored,
    and each handler found before is put back after. Raises
    ``ValueError`` for a duration or deadline that is not a finite number of seconds (above 0
    for ``duration_s``, at least 0 for the others), :class:`GraphError` before anything starts,
    or :class:`NodeError` if a node stopped the run.
    ``scheduler`` (or a function making one from the graph) governs the CPU
    (:class:`edgepipe.sched.Scheduler`); without one the run is ungoverned. ``memory`` and
    ``spans``: see :class:`~edgepipe.runtime.engine.Runtime`.
    """
    if duration_s is not None:
        check_seconds("duration_s", duration_s, above=0)
    check_seconds("drain_timeout_s", drain_timeout_s, at_least=0)
    check_seconds("stop_timeout_s", stop_timeout_s, at_least=0)
    graph = pipeline.validate() if isinstance(pipeline, Pipeline) else pipeline
    governs = _scheduler_for(scheduler, graph)
    results = ResultsWriter(results_path) if results_path is not None else None
    runtime = Runtime(
        graph,
        results=results,
        drain_timeout_s=drain_timeout_s,
        stop_timeout_s=stop_timeout_s,
        workers=workers,
        debug=debug,
        scheduler=governs,
        memory=memory,
        spans=spans,
    )
    loop = asyncio.get_running_loop()
    timer = loop.call_later(duration_s, runtime.request_stop) if duration_s is not None else None
    installed: list[tuple[signal.Signals, signal._HANDLER]] = []

    def on_interrupt(signum: signal.Signals) -> None:
        if runtime.stopping:
            log.warning("%s again: stopping now", signum.name)
            runtime.force_stop()
        else:
            log.warning("%s: stopping (draining queued items; Ctrl-C again to stop now)", signum.name)
            runtime.request_stop()

    if handle_signals:
        for signum in STOP_SIGNALS:
            if kept_ignored(signum):  # `nohup edgepipe run` outlives its ssh session
                continue
            installed.append((signum, signal.getsignal(signum)))
            loop.add_signal_handler(signum, on_interrupt, signum)
    try:
        return await runtime.run(watchers)
    finally:
        if timer is not None:
            timer.cancel()
        for signum, before in installed:  # what was there before (the command's), not the default
            loop.remove_signal_handler(signum)
            if before is not None:
                signal.signal(signum, after_run(before))


def run_graph(
    pipeline: Pipeline | Graph,
    *,
    loop: str = "auto",
    duration_s: float | None = None,
    results_path: str | None = None,
    drain_timeout_s: float = 5.0,
    handle_signals: bool = False,
    watchers: Sequence[Watcher] = (),
    workers: dict[str, int] | None = None,
    debug: bool = False,
    scheduler: Scheduler | Callable[[Graph], Scheduler] | None = None,
    memory: MemoryPlan | None = None,
    spans: SpanRecorder | None = None,
) -> RunReport:
    """Run ``pipeline`` on a new event loop (uvloop when installed) and return its report."""
    return run_on_loop(
        run_graph_async(
            pipeline,
            duration_s=duration_s,
            results_path=results_path,
            drain_timeout_s=drain_timeout_s,
            handle_signals=handle_signals,
            watchers=watchers,
            workers=workers,
            debug=debug,
            scheduler=scheduler,
            memory=memory,
            spans=spans,
        ),
        loop=loop,
    )


def _scheduler_for(
    scheduler: Scheduler | Callable[[Graph], Scheduler] | None, graph: Graph
) -> Scheduler | None:
    """A scheduler given, or made from the graph by the function (or class) given."""
    if scheduler is None:
        return None
    if isinstance(scheduler, type) or not hasattr(scheduler, "snapshot"):
        return cast("Callable[[Graph], Scheduler]", scheduler)(graph)
    return cast("Scheduler", scheduler)
