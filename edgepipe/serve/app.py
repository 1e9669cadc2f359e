"""The HTTP app on the pipeline's own event loop: ``/metrics``, ``/health``, ``/graph``, and
WebRTC signalling (``/offer``, ``/whep``: :mod:`~edgepipe.serve.signalling`).

:func:`build_app` makes the :class:`aiohttp.web.Application` for a running
:class:`~edgepipe.runtime.engine.Runtime` (routes are registered in :func:`add_routes`, the one
place to add more); :class:`HttpServer` is the runtime watcher that serves it while the nodes
run and closes the socket when they are done (``edgepipe run --port N``).

``/metrics`` and ``/health`` answer from a snapshot at most 0.5 s old
(:class:`~edgepipe.serve.metrics.SnapshotCache`), so scrapers cannot load the pipeline. No route
sends CORS headers: a page of another origin must never read an answer (see
:mod:`~edgepipe.serve.security`, which also refuses a non-loopback ``Host`` on loopback).
"""

from __future__ import annotations

import asyncio
import logging
import socket

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from edgepipe.graph.as_data import graph_dict
from edgepipe.runtime.engine import Runtime
from edgepipe.serve import ice
from edgepipe.serve.config import MAX_REQUEST_BYTES, ServeConfig, ServeError
from edgepipe.serve.health import SAMPLE_S, ProgressTracker
from edgepipe.serve.metrics import MetricsText, SnapshotCache
from edgepipe.serve.page import add_page
from edgepipe.serve.security import ServerLog, middlewares
from edgepipe.serve.signalling import BOUND_HOST, STREAMS, add_signalling, close_viewers
from edgepipe.serve.viewer_metrics import StreamCollector
from edgepipe.serve.webrtc_stream import streams_of

log = logging.getLogger(__name__)

RUNTIME = web.AppKey("runtime", Runtime)
CONFIG = web.AppKey("config", ServeConfig)
TRACKER = web.AppKey("tracker", ProgressTracker)
SNAPSHOTS = web.AppKey("snapshots", SnapshotCache)
METRICS = web.AppKey("metrics", MetricsText)

SHUTDOWN_S = 0.2
"""At the end, how long a request in progress may take to finish, and then to be cancelled
(aiohttp waits for each in turn; 60 s by default): a client that sends half a request must not
hold up the stop (the whole of it fits in the drain deadline + 1 s)."""


def build_app(runtime: Runtime, config: ServeConfig | None = None) -> web.Application:
    """The app serving ``runtime``. ``config`` (default: loopback, port 0) sets the token rules."""
    config = config or ServeConfig(port=0)
    app = web.Application(client_max_size=MAX_REQUEST_BYTES, middlewares=middlewares(config))
    app[RUNTIME] = runtime
    app[CONFIG] = config
    app[BOUND_HOST] = config.host
    app[TRACKER] = ProgressTracker(config.stall_after_s)
    # /metrics, /health and the sampler share one snapshot per 0.5 s: a scraper hammering
    # them does not load the pipeline.
    app[SNAPSHOTS] = SnapshotCache(runtime.snapshot)
    app[METRICS] = MetricsText(app[SNAPSHOTS])
    app[STREAMS] = streams_of(runtime.graph)
    app[METRICS].registry.register(StreamCollector(app[STREAMS]))
    for stream in app[STREAMS]:  # sources' states and nodes' errors reach the viewers
        runtime.add_listener(stream.viewers.hear)
    add_routes(app)
    return app


def add_routes(app: web.Application) -> None:
    """Every route of the app (WebRTC signalling and the viewer page go here too)."""
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_get("/graph", graph)
    add_signalling(app)
    add_page(app, app[CONFIG])


async def metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].body()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def health(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    # /health answers without the token: off loopback it names no camera address (see /graph).
    urls = {} if request.app[CONFIG].needs_token else {
        n.node_id: url for n in runtime.graph.nodes if isinstance(url := getattr(n.target, "url", None), str)
    }  # fmt: skip
    snap = request.app[SNAPSHOTS]()
    healthy, body = request.app[TRACKER].verdict(snap, stopping=runtime.stopping, urls=urls)
    return web.json_response(body, status=200 if healthy else 503)


async def graph(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    return web.json_response(graph_dict(runtime.graph, runtime.graph.workers()))


class HttpServer:
    """A runtime watcher serving :func:`build_app` at ``config``'s address while the nodes run.

    ``url`` is set and ``ready`` is set once it listens (with port 0, ``url`` has the port
    picked). A port in use raises :class:`ServeError`, which stops the run."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.url: str | None = None
        self.ready = asyncio.Event()
        self._sock: socket.socket | None = None

    def bind(self) -> None:
        """Take the address now (``edgepipe run`` does, before any node starts: a port in use
        stops the run before a camera is opened). Raises :class:`ServeError`; again is harmless."""
        if self._sock is not None:
            return
        try:  # a wrong ICE setting is the operator's error, not a viewer's bad request
            ice.configuration()
            ice.ice_hosts()
        except ValueError as exc:
            raise ServeError(str(exc), address="EDGEPIPE_ICE_SERVERS/EDGEPIPE_ICE_HOSTS") from exc
        host, port = self.config.host, self.config.port
        try:
            family, kind, proto, _, address = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(address)
                sock.listen(128)
                sock.setblocking(False)
            except OSError:
                sock.close()
                raise
        except OSError as exc:
            raise ServeError(str(exc), address=f"{host}:{port}") from exc
        self._sock = sock

    async def __call__(self, runtime: Runtime) -> None:
        self.bind()
        sock = self._sock
        assert sock is not None
        app = build_app(runtime, self.config)
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, logger=ServerLog(), shutdown_timeout=SHUTDOWN_S
        )
        await runner.setup()
        try:
            await web.SockSite(runner, sock).start()
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            self.url = f"http://{shown}:{port}"
            self.ready.set()
            routes = (
                "/ (the viewer page), /metrics, /health, /graph, /offer, /whep"
                if app[STREAMS]
                else ("/metrics, /health, /graph")
            )
            log.info("serving %s%s%s", self.url, routes, _token_note(self.config))
            async with asyncio.TaskGroup() as tg:
                for stream in app[STREAMS]:
                    tg.create_task(stream.viewers.run(), name="viewers")
                await _sample_progress(app[TRACKER], app[SNAPSHOTS])
        finally:
            await close_viewers(app)
            await runner.cleanup()
            sock.close()
            self._sock = None


async def _sample_progress(tracker: ProgressTracker, snapshots: SnapshotCache) -> None:
    """/health answers from recent progress, sampled here between requests (until cancelled)."""
    failed = False
    while True:
        try:
            tracker.sample(snapshots())
        except Exception:  # a bug here must not stop the pipeline: /health goes stale
            if not failed:
                log.exception("sampling progress for /health failed")
            failed = True
        await asyncio.sleep(SAMPLE_S)


def _token_note(config: ServeConfig) -> str:
    if not config.needs_token:
        return ""
    opened = "/health and /metrics" if config.metrics_open else "/health"
    return f" (token required but on {opened})"
