"""The serving layer's guards: the token, body sizes, and bad input answered 400, not a crash.

Middlewares run in the order :func:`middlewares` gives them: errors outermost (so a guard's own
refusal is still an answer), then size, then the token.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from edgepipe.core.redact import redact_text
from edgepipe.serve.config import MAX_REQUEST_BYTES, ServeConfig

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPEN_PATHS = frozenset({"/health"})
"""Answered without the token, whatever the address: a liveness probe has no credentials."""


def middlewares(config: ServeConfig) -> list[Middleware]:
    """The app's middlewares, outermost first."""
    open_paths = OPEN_PATHS | ({"/metrics"} if config.metrics_open else set())
    token = config.token if config.needs_token else None

    @web.middleware
    async def bad_input(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except ValueError as exc:  # malformed JSON, SDP, msgpack, text: the client's fault
            log.warning(
                "%s %s: bad request: %s",
                request.method,
                _path(request),
                printable(redact_text(str(exc))[:200]),
            )
            return web.json_response({"error": "bad request"}, status=400)

    @web.middleware
    async def body_size(request: web.Request, handler: Handler) -> web.StreamResponse:
        # Refused before a handler runs: aiohttp enforces client_max_size only when a handler
        # reads the body.
        length = request.content_length
        if length is not None and length > MAX_REQUEST_BYTES:
            log.warning("%s %s: body of %d bytes refused", request.method, _path(request), length)
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_REQUEST_BYTES, actual_size=length)
        return await handler(request)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is not None and request.path not in open_paths and not _authorized(request, token):
            log.warning("%s %s: unauthorized (no or wrong token)", request.method, _path(request))
            return web.json_response(
                {"error": "unauthorized: send Authorization: Bearer TOKEN or ?token=TOKEN"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await handler(request)

    return [bad_input, body_size, auth]


def _authorized(request: web.Request, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    given = header[7:].strip() if header[:7].lower() == "bearer " else request.query.get("token", "")
    # Compared in constant time, as bytes: a non-ASCII guess must not raise.
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), token.encode("utf-8", "surrogateescape")
    )


def _path(request: web.Request) -> str:
    """The path for a log line: bounded, without the query (it may carry the token), and with
    control characters escaped (a client's ``%0A`` must not forge a log line)."""
    return printable(redact_text(request.path)[:100])


def printable(text: str) -> str:
    """``text`` with line breaks and other control characters escaped: one log line, always."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
