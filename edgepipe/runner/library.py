"""One runner for the command and for Python: ``edgepipe.run(pipeline)`` does what
``edgepipe run FILE`` does.

Around the engine (:func:`edgepipe.runtime.run.run_graph_async`) it wires:

- **the governor**: a :class:`~edgepipe.sched.Scheduler` for every run, keeping the pipeline's
  ``headroom`` (``Pipeline(headroom=0.3)``, or ``headroom=`` here) of the usable cores free;
  ``headroom=0`` or ``governed=False`` only measure (``--headroom 0``, ``--no-governor``);
- **serving** when asked (``port=``): the viewer page, WebRTC, ``/metrics``, ``/health`` and
  ``/graph``; the address is taken before any node starts, so a port in use raises
  :class:`~edgepipe.serve.ServeError` before a camera is opened;
- **the heartbeat** (``health_file=``, :mod:`edgepipe.runtime.heartbeat`);
- **the memory plan**: the run's own, announced once every node has started (the engine's; pass
  ``memory=`` to give it one);
- **allocator tuning** (``tune_malloc``: :func:`~edgepipe.runtime.malloc.fix_mmap_threshold`).

The budget, the gate and the memory plan are the run's (:mod:`edgepipe.core.scope`): two runs in
one process, in two threads or as two ``run_async`` in one loop, are each governed by their own.

It sits above ``serve`` in the layers because it wires the serving; the engine's runner stays in
:mod:`edgepipe.runtime.run` (ungoverned unless given a scheduler: what tests use), and the command
(:mod:`edgepipe.cli.run`) parses its options and calls this one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from edgepipe.core.loop import run as run_on_loop
from edgepipe.core.spans import SpanRecorder
from edgepipe.graph.pipeline import Graph, Pipeline
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime import run as engine
from edgepipe.runtime.engine import RunReport, Watcher
from edgepipe.runtime.heartbeat import heartbeat
from edgepipe.runtime.malloc import fix_mmap_threshold
from edgepipe.sched.scheduler import Scheduler

log = logging.getLogger(__name__)


async def run_async(
    pipeline: Pipeline | Graph,
    *,
    headroom: float | None = None,
    governed: bool = True,
    port: int | None = None,
    host: str = "127.0.0.1",
    metrics_open: bool = False,
    health_file: str | None = None,
    duration_s: float | None = None,
    results_path: str | None = None,
    drain_timeout_s: float = 5.0,
    stop_timeout_s: float = 5.0,
    handle_signals: bool = False,
    watchers: Sequence[Watcher] = (),
    workers: dict[str, int] | None = None,
    debug: bool = False,
    memory: MemoryPlan | None = None,
    spans: SpanRecorder | None = None,
    tune_malloc: bool = True,
) -> RunReport:
    """Validate and run ``pipeline`` on the running loop, governed, as ``edgepipe run`` does.

    ``headroom``: the share of the usable cores kept free, in [0, 1) (default: the pipeline's
    own, 0.3 unless it says otherwise; 0: ungoverned). ``governed=False``: the governor measures
    but never slows any work (``--no-governor``). ``port`` (0: any free one), ``host`` and
    ``metrics_open``: serve as ``--port``, ``--host`` and ``--metrics-open`` do (a host other than
    loopback needs ``$EDGEPIPE_TOKEN``). ``health_file``: keep a heartbeat there. The rest is
    :func:`edgepipe.runtime.run.run_graph_async`'s. Raises ``ValueError`` for a headroom out of range,
    :class:`~edgepipe.serve.ServeError` when the address cannot be taken, and what the engine
    raises; nothing has started then.
    """
    graph = pipeline.validate() if isinstance(pipeline, Pipeline) else pipeline
    if tune_malloc:
        fix_mmap_threshold()  # a flat RSS over months (see edgepipe.runtime.malloc)
    scheduler = Scheduler(graph, headroom=headroom, governed=governed)
    around = list(watchers)
    if port is not None:
        around.insert(0, serving(graph, port, host, metrics_open=metrics_open))
    if health_file is not None:
        around.append(heartbeat(health_file))
    return await engine.run_graph_async(
        graph,
        duration_s=duration_s,
        results_path=results_path,
        drain_timeout_s=drain_timeout_s,
        stop_timeout_s=stop_timeout_s,
        handle_signals=handle_signals,
        watchers=around,
        workers=workers,
        debug=debug,
        scheduler=scheduler,
        memory=memory,
        spans=spans,
    )


def run(
    pipeline: Pipeline | Graph,
    *,
    loop: str = "auto",
    headroom: float | None = None,
    governed: bool = True,
    port: int | None = None,
    host: str = "127.0.0.1",
    metrics_open: bool = False,
    health_file: str | None = None,
    duration_s: float | None = None,
    results_path: str | None = None,
    drain_timeout_s: float = 5.0,
    stop_timeout_s: float = 5.0,
    handle_signals: bool = False,
    watchers: Sequence[Watcher] = (),
    workers: dict[str, int] | None = None,
    debug: bool = False,
    memory: MemoryPlan | None = None,
    spans: SpanRecorder | None = None,
    tune_malloc: bool = True,
) -> RunReport:
    """:func:`run_async` on a new event loop (``loop``: ``auto``, uvloop when installed,
    ``uvloop`` or ``asyncio``); returns the run's report."""
    return run_on_loop(
        run_async(
            pipeline,
            headroom=headroom,
            governed=governed,
            port=port,
            host=host,
            metrics_open=metrics_open,
            health_file=health_file,
            duration_s=duration_s,
            results_path=results_path,
            drain_timeout_s=drain_timeout_s,
            stop_timeout_s=stop_timeout_s,
            handle_signals=handle_signals,
            watchers=watchers,
            workers=workers,
            debug=debug,
            memory=memory,
            spans=spans,
            tune_malloc=tune_malloc,
        ),
        loop=loop,
    )


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
