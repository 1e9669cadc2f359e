"""Serving a running pipeline: over HTTP (``/metrics``, ``/health``, ``/graph``) and over WebRTC
(one shared encoder per source: :mod:`~edgepipe.serve.encoder`, :mod:`~edgepipe.serve.webrtc`;
not routed by the app yet).

``edgepipe run FILE --port N`` starts it; in code, pass ``HttpServer(ServeConfig(port=N))`` as a
watcher of the run.
"""

from __future__ import annotations

from edgepipe.serve.app import HttpServer, add_routes, build_app
from edgepipe.serve.config import ServeConfig, ServeConfigError, ServeError

__all__ = ["HttpServer", "ServeConfig", "ServeConfigError", "ServeError", "add_routes", "build_app"]
