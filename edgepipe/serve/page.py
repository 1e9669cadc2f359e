"""The viewer page: ``GET /`` (plain HTML and JavaScript shipped in the package, no build step)
and ``GET /streams``, the sources it asks the server for before its offer.

The page (``static/``) opens one peer connection with a video m-line per source, in the order
``/streams`` gives them, POSTs its offer to ``/offer`` and draws each frame's results over its
video from the ``results`` data channel (see :mod:`~edgepipe.wire.messages`).

The token: a page opened as ``/?token=T`` reads it from its own address and sends it as
``Authorization: Bearer T`` on every request it makes; the page's own scripts and style sheet are
linked with ``?token=T`` (filled in here, when the server needs a token) since a ``<script>``
tag sends no header. The page is answered with a Content-Security-Policy that allows only its own
scripts (no inline script) and ``Referrer-Policy: no-referrer`` (the token is in its address).
"""

from __future__ import annotations

import importlib.resources
from urllib.parse import quote

from aiohttp import web

from edgepipe.serve.config import ServeConfig
from edgepipe.serve.signalling import STREAMS

STATIC_FILES = {
    "msgpack.js": "text/javascript; charset=utf-8",
    "tile.js": "text/javascript; charset=utf-8",
    "viewer.js": "text/javascript; charset=utf-8",
    "viewer.css": "text/css; charset=utf-8",
}
"""What ``/static/NAME`` serves (nothing else: no path reaches the file system)."""

QUERY_MARK = "{{query}}"
"""Where ``index.html`` links its files: replaced by ``?token=T`` (or nothing)."""

HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
PAGE_HEADERS = {
    **HEADERS,
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; media-src 'self' blob: mediastream:; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
}

PAGE = web.AppKey("viewer_page", dict[str, bytes])


def add_page(app: web.Application, config: ServeConfig) -> None:
    """``/``, ``/static/{name}`` and ``/streams``. Reads the page's files once, here (a few KiB)."""
    folder = importlib.resources.files("edgepipe.serve") / "static"
    files = {name: (folder / name).read_bytes() for name in [*STATIC_FILES, "index.html"]}
    query = f"?token={quote(config.token, safe='')}" if config.needs_token and config.token else ""
    files["index.html"] = files["index.html"].replace(QUERY_MARK.encode(), query.encode())
    app[PAGE] = files
    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/streams", streams)


async def index(request: web.Request) -> web.Response:
    return web.Response(
        body=request.app[PAGE]["index.html"],
        headers={**PAGE_HEADERS, "Content-Type": "text/html; charset=utf-8"},
    )


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    content_type = STATIC_FILES.get(name)
    if content_type is None:
        raise web.HTTPNotFound(text="no such file\n")
    return web.Response(body=request.app[PAGE][name], headers={**HEADERS, "Content-Type": content_type})


async def streams(request: web.Request) -> web.Response:
    """``{"sources": [...], "viewers": n, "limit": n}``: the sources of the pipeline's stream, in
    the order of the video m-lines its answers take; no sources when it has no stream."""
    found = request.app[STREAMS]
    if not found:
        body: dict[str, object] = {"sources": [], "viewers": 0, "limit": 0}
    else:
        viewers = found[0].viewers
        body = {"sources": list(viewers.encoders), "viewers": len(viewers.viewers), "limit": viewers.limit}
    return web.json_response(body, headers=HEADERS)
