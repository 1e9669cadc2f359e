"""Results as msgpack over TCP, to every program that connects: :class:`TcpStream`.

::

    stream = TcpStream(port=9000)
    p.sink("tcp", stream, inputs=[faces, events])

Each message is a 4-byte big-endian length, then one msgpack map of the WebRTC data channel's
schema (:mod:`edgepipe.wire.messages`): a program reads the same messages a viewer gets.
``python -m edgepipe.sinks.streams.client 127.0.0.1 9000`` prints them as JSON lines.

The pipeline never waits for a client. Each client has a bounded buffer (``buffer_bytes``): a
message that does not fit in a client's buffer is dropped for that client only (counted in
``dropped``), whole, so its stream stays framed; the others get it. A client that disconnects is
forgotten. What a client sends is ignored, but for the token (below).

Who may connect: on loopback (the default, ``127.0.0.1``), any local program. Any other address
would give the results (boxes, what a language model said of the picture) to anyone who can
reach the port, so it needs a token, as the HTTP server does: ``token=`` or ``$EDGEPIPE_TOKEN``,
at least 8 characters, which a client sends as its first line (``TOKEN\\n``) before it is sent
anything. A wrong token, or none within :data:`TOKEN_WAIT_S`, closes the connection (counted in
``refused``). A token given as ``token=`` is asked of clients on loopback too. Plain TCP: the
token and the results cross the network in clear, as with the HTTP server without a proxy.

Gauges (``--stats``, ``/metrics``): ``clients`` connected now, ``sent`` (messages handed to a
client's connection, counted per client), ``dropped`` (per client, its buffer full), ``refused``
(connections closed for a wrong token, or past ``max_clients``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import socket
from typing import Any, cast

from edgepipe.sinks.streams.framing import check_host, check_port, framed, is_result, node_gauges
from edgepipe.wire.exposure import DEFAULT_HOST, TOKEN_ENV, is_loopback
from edgepipe.wire.messages import message_of, pack

log = logging.getLogger(__name__)

TOKEN_WAIT_S = 5.0
"""How long a client has to send its token line."""
MAX_TOKEN_LINE = 1024
"""Bytes of a token line at most: more without a newline is not a token."""
CLOSE_WAIT_S = 1.0
"""At stop, how long clients are given to take what their buffers still hold."""


class TcpStream:
    """A sink serving every result to the TCP clients connected at the time (see the module
    docstring). Listens from its declaration, so a port in use is an error before anything
    starts; sends from the pipeline's start."""

    def __init__(
        self,
        port: int,
        host: str = DEFAULT_HOST,
        *,
        token: str | None = None,
        buffer_bytes: int = 1024 * 1024,
        max_clients: int = 16,
    ) -> None:
        """``port``: 0 takes a free one (read :attr:`port`). ``buffer_bytes``: what one client
        may have waiting before its messages are dropped. Raises ``ValueError`` for a bad port
        or host, a host that is not loopback without a token, an address that cannot be taken
        (in use), a token shorter than 8 characters, sizes below 1."""
        self.host = check_host(host, "TcpStream")
        port = check_port(port, "TcpStream", allow_zero=True)
        if token is None and not is_loopback(self.host):
            token = os.environ.get(TOKEN_ENV) or None
            if token is None:
                raise ValueError(
                    f"TcpStream on {self.host} (not loopback) needs a token: set ${TOKEN_ENV} or pass "
                    f"token=...; without one anyone who reaches the port reads the results (or bind "
                    f"{DEFAULT_HOST} and tunnel to it: ssh -L)"
                )
        if token is not None and (not isinstance(token, str) or len(token) < 8):
            raise ValueError("TcpStream: the token must be a string of at least 8 characters")
        if isinstance(buffer_bytes, bool) or not isinstance(buffer_bytes, int) or buffer_bytes < 1:
            raise ValueError(f"TcpStream: buffer_bytes must be a positive integer, got {buffer_bytes!r}")
        if isinstance(max_clients, bool) or not isinstance(max_clients, int) or max_clients < 1:
            raise ValueError(f"TcpStream: max_clients must be a positive integer, got {max_clients!r}")
        self.token = token
        self.buffer_bytes = buffer_bytes
        self.max_clients = max_clients
        self.sent = 0
        """Messages handed to clients' connections (one per client)."""
        self.dropped = 0
        """Messages not sent to a client because its buffer was full (one per client)."""
        self.refused = 0
        """Connections closed before being sent anything: a wrong or missing token, too many."""
        self._sock: socket.socket | None = self._bind(port)
        self.port: int = self._sock.getsockname()[1]
        """The port it listens on (the one picked, for ``port=0``)."""
        self._server: asyncio.Server | None = None
        self._clients: set[_Client] = set()
        """Connected and allowed: each message goes to each of them."""
        self._waiting: set[_Client] = set()
        """Connected, their token not yet read."""
        self._gauges: dict[str, Any] = {}
        self._all_gone: asyncio.Event | None = None

    @property
    def clients(self) -> int:
        """Clients connected now (and past the token)."""
        return len(self._clients)

    @property
    def address(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{shown}:{self.port}"

    def _bind(self, port: int) -> socket.socket:
        try:
            family, kind, proto, _, address = socket.getaddrinfo(
                self.host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(address)
                sock.listen(128)  # those past max_clients are taken, then refused: said in the log
                sock.setblocking(False)
            except OSError:
                sock.close()
                raise
        except OSError as exc:
            why = exc.strerror or exc
            raise ValueError(f"TcpStream: cannot listen on {self.host}:{port}: {why}") from None
        return sock

    def close(self) -> None:
        """Let go of the port of a stream that will not run (a running one does at stop)."""
        if self._sock is not None and self._server is None:
            self._sock.close()
            self._sock = None

    # -- node hooks -------------------------------------------------------------------------

    async def start(self) -> None:
        self._gauges = node_gauges()
        if self._sock is None:  # restarted: the same port again
            self._sock = self._bind(self.port)
        self._all_gone = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Client(self), sock=self._sock)
        self._update_gauges()
        note = ", clients send the token first" if self.token else ""
        log.info("streaming results on tcp://%s (length-prefixed msgpack%s)", self.address, note)

    async def process(self, item: Any, lane: str) -> None:
        """Send ``item`` to every client, on the event loop; never waits for one."""
        if not self._clients or not is_result(item):
            return  # nobody to pack it for
        frame = framed(pack(message_of(item, lane)))
        for client in list(self._clients):
            if client.send(frame):
                self.sent += 1
            else:
                self.dropped += 1
        self._update_gauges()

    async def stop(self) -> None:
        """Stop listening, give clients :data:`CLOSE_WAIT_S` to take what they have waiting,
        then cut the rest off."""
        server, self._server, self._sock = self._server, None, None
        if server is not None:
            server.close()
        connected = self._clients | self._waiting
        for client in connected:
            client.close()
        if connected and self._all_gone is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await self._all_gone.wait()
        for client in self._clients | self._waiting:
            client.abort()
        self._clients.clear()
        self._waiting.clear()
        self._update_gauges()

    # -- clients ----------------------------------------------------------------------------

    def _joined(self, client: _Client) -> None:
        if len(self._clients) + len(self._waiting) >= self.max_clients:
            self._refuse(client, f"already {self.max_clients} clients (max_clients)")
            return
        if self.token is None:
            self._allow(client)
        else:
            self._waiting.add(client)
            client.wait_for_token(TOKEN_WAIT_S)

    def _allow(self, client: _Client) -> None:
        self._waiting.discard(client)
        self._clients.add(client)
        log.info("tcp://%s: client %s connected (%d now)", self.address, client.peer, len(self._clients))
        self._update_gauges()

    def _refuse(self, client: _Client, why: str) -> None:
        self.refused += 1
        self._waiting.discard(client)
        log.warning("tcp://%s: client %s refused: %s", self.address, client.peer, why)
        client.abort()
        self._update_gauges()

    def _left(self, client: _Client) -> None:
        if client in self._clients:
            self._clients.discard(client)
            lost = f", {client.dropped} dropped (it read too slowly)" if client.dropped else ""
            log.info(
                "tcp://%s: client %s left after %d messages%s", self.address, client.peer, client.sent, lost
            )
        self._waiting.discard(client)
        if not self._clients and not self._waiting and self._all_gone is not None:
            self._all_gone.set()
        self._update_gauges()

    def _update_gauges(self) -> None:
        g = self._gauges
        g["clients"] = len(self._clients)
        g["sent"] = self.sent
        g["dropped"] = self.dropped
        g["refused"] = self.refused


class _Client(asyncio.Protocol):
    """One connection: its buffer's bound, its token, its counts."""

    def __init__(self, stream: TcpStream) -> None:
        self.stream = stream
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.sent = 0
        self.dropped = 0
        self._line = b""
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not an asyncio.Transport subclass, but has its methods
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"
        self.stream._joined(self)

    def wait_for_token(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(timeout_s, self._no_token)

    def _no_token(self) -> None:
        if self in self.stream._waiting:
            self.stream._refuse(self, f"no token line within {TOKEN_WAIT_S:g} s")

    def data_received(self, data: bytes) -> None:
        stream = self.stream
        if self not in stream._waiting:
            return  # a client has nothing to say after its token
        self._line += data
        line, newline, _ = self._line.partition(b"\n")
        if not newline:
            if len(self._line) > MAX_TOKEN_LINE:
                stream._refuse(self, "no token line (too long)")
            return
        self._cancel_timer()
        token = (stream.token or "").encode()
        if hmac.compare_digest(line.strip(), token):
            self._line = b""
            stream._allow(self)
        else:
            stream._refuse(self, "wrong token")

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.stream._left(self)

    def send(self, frame: bytes) -> bool:
        """Queue ``frame`` whole if it fits in this client's buffer (or the buffer is empty).
        False when it was dropped."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        waiting = transport.get_write_buffer_size()
        if waiting and waiting + len(frame) > self.stream.buffer_bytes:
            if not self.dropped:
                log.warning(
                    "tcp://%s: client %s reads too slowly; messages it has no room for are dropped "
                    "(counted in 'dropped')", self.stream.address, self.peer,
                )  # fmt: skip
            self.dropped += 1
            return False
        transport.write(frame)
        self.sent += 1
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()  # what is buffered still goes, then the connection closes

    def abort(self) -> None:
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
