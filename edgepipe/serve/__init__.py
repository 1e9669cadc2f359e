"""Serving a running pipeline: over HTTP (``/`` the viewer page, ``/metrics``, ``/health``,
``/graph``) and over WebRTC (one shared encoder per source and codec:
:mod:`~edgepipe.serve.encoder`, :mod:`~edgepipe.serve.webrtc`, :mod:`~edgepipe.serve.webrtc_stream`).

``edgepipe run FILE --port N`` starts it; in code, pass ``HttpServer(ServeConfig(port=N))`` as a
watcher of the run.

Nothing heavy is imported until it is used: a pipeline that declares a
:class:`~edgepipe.serve.webrtc_stream.WebRTCStream` but runs without ``--port`` never loads aiohttp,
aiortc or prometheus-client (about 30 MB on an edge box).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgepipe.core.lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from edgepipe.serve.app import HttpServer, add_routes, build_app
    from edgepipe.serve.config import ServeConfig, ServeConfigError, ServeError

__all__ = ["HttpServer", "ServeConfig", "ServeConfigError", "ServeError", "add_routes", "build_app"]

_HOMES = {
    "HttpServer": "edgepipe.serve.app",
    "add_routes": "edgepipe.serve.app",
    "build_app": "edgepipe.serve.app",
    "ServeConfig": "edgepipe.serve.config",
    "ServeConfigError": "edgepipe.serve.config",
    "ServeError": "edgepipe.serve.config",
}


__getattr__, __dir__ = _lazy_exports(__name__, _HOMES)
