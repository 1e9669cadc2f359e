"""One way to run: ``edgepipe.run(pipeline, RunConfig(...))`` does what ``edgepipe run FILE``
does, and is what the command, a Python program and a test all call.

From its :class:`~edgepipe.runner.config.RunConfig` it builds the engine
(:class:`~edgepipe.runtime.engine.Runtime`) and drives it (:func:`~edgepipe.runtime.drive.drive`:
the timer and the stop signals), with around it:

- **the governor**: a :class:`~edgepipe.sched.Scheduler` for every run, keeping the pipeline's
  ``headroom`` (``Pipeline(headroom=0.3)``, or ``RunConfig(headroom=…)``) of the usable cores
  free; ``headroom=0`` or ``governed=False`` only measure (``--headroom 0``, ``--no-governor``);
- **serving** when asked (``port``): the viewer page, WebRTC, ``/metrics``, ``/health`` and
  ``/graph``; the address is taken before any node starts, so a port in use raises
  :class:`~edgepipe.serve.ServeError` before a camera is opened;
- **the heartbeat** (``health_file``, :mod:`edgepipe.runtime.heartbeat`);
- **the results file** (``results_path``, :class:`~edgepipe.wire.results.ResultsWriter`);
- **the memory plan**: the run's own, announced once every node has started (``memory`` gives it
  one);
- **allocator tuning** (``tune_malloc``: :func:`~edgepipe.runtime.malloc.fix_mmap_threshold`).

The budget, the gate and the memory plan are the run's (:mod:`edgepipe.core.scope`): two runs in
one process, in two threads or as two ``run_async`` in one loop, are each governed by their own.
It sits above ``serve`` in the layers because it wires the serving; the command
(:mod:`edgepipe.cli.run`) turns its options into a :class:`RunConfig` and calls this one.
"""

from __future__ import annotations

import logging

from edgepipe.core.loop import run as run_on_loop
from edgepipe.graph.pipeline import Graph, Pipeline
from edgepipe.runner.config import RunConfig
from edgepipe.runtime.drive import drive
from edgepipe.runtime.engine import RunReport, Runtime, Watcher
from edgepipe.runtime.heartbeat import heartbeat
from edgepipe.runtime.malloc import fix_mmap_threshold
from edgepipe.sched.scheduler import Scheduler
from edgepipe.wire.results import ResultsWriter

log = logging.getLogger(__name__)


async def run_async(pipeline: Pipeline | Graph, config: RunConfig | None = None) -> RunReport:
    """Validate and run ``pipeline`` on the running loop as ``config`` says (default: governed, as
    ``edgepipe run`` does); returns the run's report.

    Raises :class:`~edgepipe.core.errors.GraphError` for a pipeline that cannot run,
    :class:`~edgepipe.serve.ServeError` when the address cannot be taken (nothing has started
    then), and :class:`~edgepipe.core.errors.NodeError` if a node stopped the run.
    """
    config = RunConfig() if config is None else config
    graph = pipeline.validate() if isinstance(pipeline, Pipeline) else pipeline
    if config.tune_malloc:
        fix_mmap_threshold()  # a flat RSS over months (see edgepipe.runtime.malloc)
    scheduler = Scheduler(graph, headroom=config.headroom, governed=config.governed)
    around = list(config.watchers)
    if config.port is not None:
        around.insert(0, serving(graph, config.port, config.host, metrics_open=config.metrics_open))
    if config.health_file is not None:
        around.append(heartbeat(config.health_file))
    results = ResultsWriter(config.results_path) if config.results_path is not None else None
    runtime = Runtime(
        graph,
        results=results,
        drain_timeout_s=config.drain_timeout_s,
        stop_timeout_s=config.stop_timeout_s,
        workers=dict(config.workers),
        debug=config.debug,
        scheduler=scheduler,
        memory=config.memory,
        spans=config.spans,
    )
    return await drive(runtime, around, duration_s=config.duration_s, handle_signals=config.handle_signals)


def run(pipeline: Pipeline | Graph, config: RunConfig | None = None) -> RunReport:
    """:func:`run_async` on a new event loop (``config.loop``: ``auto``, uvloop when installed,
    ``uvloop`` or ``asyncio``); returns the run's report."""
    config = RunConfig() if config is None else config
    return run_on_loop(run_async(pipeline, config), loop=config.loop)


def serving(graph: Graph, port: int, host: str = "127.0.0.1", *, metrics_open: bool = False) -> Watcher:
    """The HTTP server of a run (a watcher), its address taken now. Raises
    :class:`~edgepipe.serve.ServeError` (the port in use, a wrong ICE setting) and, for a
    pipeline with two streams, :class:`~edgepipe.core.errors.GraphError`: before anything runs."""
    from edgepipe.serve import HttpServer, ServeConfig  # aiohttp and aiortc: only when serving
    from edgepipe.serve.webrtc_stream import streams_of

    streams_of(graph)  # two streams in one pipeline: refused now, not at the first viewer
    server = HttpServer(ServeConfig.from_env(port, host, metrics_open=metrics_open))
    server.bind()  # a port in use stops here, before any camera is opened
    return server
