"""The serving layer's guards: the token, the ``Host`` header, body sizes, and bad input
answered 400, not a crash.

Middlewares run in the order :func:`middlewares` gives them: errors outermost (so a guard's own
refusal is still an answer), then the host, then size, then the token.

Log lines of refusals (400, 401, 403, 413) are rate-limited per kind (:class:`LogBudget`): a
client hammering the server with bad requests costs a few lines per :data:`LOG_WINDOW_S`, and
the next line says how many were left out.

DNS rebinding: on loopback without a token, a page of another site can point its own host name
at 127.0.0.1 and make the browser send requests here as same-origin ones. Its requests carry that
name in ``Host``, so any ``Host`` but a loopback name or address is refused (403). With a token
(off loopback) the token covers it: a page cannot know it. A proxy in front must pass a loopback
``Host`` (nginx: ``proxy_set_header Host 127.0.0.1;``).

No CORS headers, on purpose: a page of another origin must never read an answer (the browser
withholds it without ``Access-Control-Allow-Origin``), and cannot send a JSON or SDP body with
its content type (that needs a preflight, never allowed; ``/offer`` and ``/whep`` take nothing
else). A request that changes something (any method but GET and HEAD) whose ``Origin`` is not
this server's own is refused (403) as well: a browser always says where a cross-site request
comes from.
"""

from __future__ import annotations

import codecs
import hmac
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.log import server_logger
from aiohttp.typedefs import Middleware

from edgepipe.serve.config import MAX_REQUEST_BYTES, ServeConfig
from edgepipe.wire.redact import redact_text

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPEN_PATHS = frozenset({"/health"})
"""Answered without the token, whatever the address: a liveness probe has no credentials."""

LOG_WINDOW_S = 10.0
LOG_LINES_PER_WINDOW = 5
"""At most this many log lines of one kind of refusal per :data:`LOG_WINDOW_S`."""


class LogBudget:
    """At most ``lines`` log lines per ``window_s``; the rest are counted, and the first line
    after them says how many were left out. Not thread-safe (the event loop's)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        lines: int = LOG_LINES_PER_WINDOW,
        window_s: float = LOG_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.lines = lines
        self.window_s = window_s
        self.suppressed = 0
        """Lines left out since the last one logged."""
        self.total_suppressed = 0
        self._clock = clock
        self._window_start = float("-inf")
        self._logged = 0

    def warning(self, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at WARNING if the budget allows; False when it was left out."""
        now = self._clock()
        if now - self._window_start >= self.window_s:
            self._window_start, self._logged = now, 0
        if self._logged >= self.lines:
            self.suppressed += 1
            self.total_suppressed += 1
            return False
        self._logged += 1
        if self.suppressed:
            msg += " (%d more like it not logged)"
            args = (*args, self.suppressed)
            self.suppressed = 0
        self.logger.warning(msg, *args, stacklevel=2)
        return True


def middlewares(config: ServeConfig) -> list[Middleware]:
    """The app's middlewares, outermost first."""
    open_paths = OPEN_PATHS | ({"/metrics"} if config.metrics_open else set())
    token = config.token if config.needs_token else None
    log_400, log_401, log_403, log_413 = (LogBudget(log) for _ in range(4))

    @web.middleware
    async def bad_input(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            _check_charset(request)
            return await handler(request)
        except web.HTTPException:
            raise
        # Malformed JSON, SDP, msgpack, text: the client's fault. RecursionError: JSON nested
        # thousands deep (json.loads recurses; 256 KiB of "[" is enough).
        except (ValueError, RecursionError) as exc:
            reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
            log_400.warning(
                "%s %s: bad request: %s",
                request.method,
                _path(request),
                printable(redact_text(reason)[:200]),
            )
            return web.json_response({"error": "bad request"}, status=400)

    @web.middleware
    async def loopback_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        origin = request.headers.get("Origin")
        if origin is not None and request.method not in ("GET", "HEAD") and not _same_origin(origin, host):
            log_403.warning(
                "%s %s: refused: a request from another site (Origin %s)",
                request.method,
                _path(request),
                printable(origin[:100]),
            )
            return web.json_response({"error": "forbidden: a request from another site"}, status=403)
        # Only without a token: see the module docstring (DNS rebinding).
        if token is None and host is not None and not is_loopback_host(host):
            log_403.warning(
                "%s %s: refused: Host %s is not a loopback name (DNS rebinding?)",
                request.method,
                _path(request),
                printable(host[:100]),
            )
            return web.json_response({"error": "forbidden: Host must be a loopback name"}, status=403)
        return await handler(request)

    @web.middleware
    async def body_size(request: web.Request, handler: Handler) -> web.StreamResponse:
        # Refused before a handler runs: aiohttp enforces client_max_size only when a handler
        # reads the body.
        length = request.content_length
        if length is not None and length > MAX_REQUEST_BYTES:
            log_413.warning("%s %s: body of %d bytes refused", request.method, _path(request), length)
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_REQUEST_BYTES, actual_size=length)
        return await handler(request)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is not None and request.path not in open_paths and not _authorized(request, token):
            log_401.warning("%s %s: unauthorized (no or wrong token)", request.method, _path(request))
            return web.json_response(
                {"error": "unauthorized: send Authorization: Bearer TOKEN or ?token=TOKEN"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await handler(request)

    return [bad_input, loopback_host, body_size, auth]


class ServerLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger (``AppRunner(logger=ServerLog())``). A request its HTTP parser
    refuses (a line too long, a bad header, not HTTP) is answered 400 by aiohttp and is the
    client's error: one rate-limited warning line, no traceback. Anything else (a bug in a
    handler: a 500) is logged as aiohttp logs it, traceback included."""

    def __init__(self, logger: logging.Logger = server_logger) -> None:
        super().__init__(logger, {})
        self.refused = LogBudget(log)

    def exception(self, msg: object, *args: object, exc_info: object = True, **kwargs: object) -> None:
        if isinstance(exc_info, HttpProcessingError):
            reason = printable(redact_text(str(exc_info.message))[:120])
            self.refused.warning("bad HTTP request from %s: %s", args[0] if args else "?", reason)
        else:
            super().exception(msg, *args, exc_info=exc_info, **kwargs)  # type: ignore[arg-type]


def _same_origin(origin: str, host: str | None) -> bool:
    """``Origin: scheme://name[:port]`` names the server the request was sent to (``Host``)."""
    _, _, authority = origin.partition("://")
    return host is not None and authority.lower() == host.lower()


def is_loopback_host(host: str) -> bool:
    """Whether a ``Host`` header names this machine by a loopback name or address, with or
    without a port: ``127.0.0.1[:port]`` (any 127.x), ``localhost[:port]``, ``[::1][:port]``."""
    host = host.lower()
    if host.startswith("["):
        name, bracket, rest = host[1:].partition("]")
        if not bracket:
            return False
    else:
        name, colon, port = host.partition(":")
        rest = colon + port
    if rest and not (rest[0] == ":" and rest[1:].isascii() and rest[1:].isdigit() and len(rest) <= 6):
        return False  # not a port (a bare IPv6 address lands here too: it needs brackets)
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _check_charset(request: web.Request) -> None:
    """A ``charset`` that names no codec is the client's error: aiohttp's ``text()`` and
    ``json()`` would raise LookupError (a 500) when a handler reads the body."""
    charset = request.charset
    if charset is not None:
        try:
            codecs.lookup(charset)
        except LookupError:
            raise ValueError(f"unknown charset {charset[:40]!r}") from None


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
