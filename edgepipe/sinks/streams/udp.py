"""Results as msgpack datagrams to one address: :class:`UdpStream`.

::

    p.sink("udp", UdpStream("127.0.0.1", 9001), inputs=faces)

Each message is one datagram holding one msgpack map of the WebRTC data channel's schema
(:mod:`edgepipe.wire.messages`), without a length (a datagram has its own). UDP is for a
consumer that prefers the newest result to every result: a datagram can be lost or reordered on
the way, and nothing is sent again.

A message bigger than ``max_datagram_bytes`` (default :data:`SAFE_DATAGRAM_BYTES`, 1200) is
dropped and counted (``too_big``), not split: splitting needs reassembly, which a consumer that
wants every message gets from :class:`~edgepipe.sinks.streams.tcp.TcpStream` instead. 1200 bytes
cross any IPv4 or IPv6 path without fragmentation (IPv6 guarantees a 1280-byte MTU; QUIC keeps
to 1200 for the same reason): a fragmented datagram is lost whenever any of its fragments is.
That holds a ``detections`` message with about 25 boxes; on loopback, or a network known to
carry them, give up to 65507.

The destination is the operator's choice, any address (a collector on another machine, a
broadcast or multicast group): nothing listens here, so nobody can come and take the results.
Sending never waits: a datagram the kernel has no room for is dropped and counted.

Gauges (``--stats``, ``/metrics``): ``sent``, ``dropped`` (every message not sent, including
``too_big``).
"""

from __future__ import annotations

import errno
import logging
import socket
from typing import Any

from edgepipe.sinks.streams.framing import check_host, check_port, is_result, node_gauges
from edgepipe.wire.messages import message_of, pack

log = logging.getLogger(__name__)

SAFE_DATAGRAM_BYTES = 1200
"""A datagram's payload that no IPv4 or IPv6 path fragments."""
MAX_DATAGRAM_BYTES = 65507
"""The largest UDP payload over IPv4."""


class UdpStream:
    """A sink sending every result as a datagram to ``host:port`` (see the module docstring)."""

    def __init__(self, host: str, port: int, *, max_datagram_bytes: int = SAFE_DATAGRAM_BYTES) -> None:
        """Raises ``ValueError`` for a bad port, a host that does not resolve, a
        ``max_datagram_bytes`` outside 1..65507."""
        self.host = check_host(host, "UdpStream")
        self.port = check_port(port, "UdpStream", allow_zero=False)
        size = max_datagram_bytes
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_DATAGRAM_BYTES:
            raise ValueError(
                f"UdpStream: max_datagram_bytes must be an integer in 1..{MAX_DATAGRAM_BYTES}, got {size!r}"
            )
        self.max_datagram_bytes = size
        try:
            family, _, _, _, address = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_DGRAM)[0]
        except OSError as exc:
            raise ValueError(f"UdpStream: cannot resolve {self.host}: {exc.strerror or exc}") from None
        self._family = family
        self._address = address
        self.sent = 0
        self.dropped = 0
        """Messages not sent: too big, or the kernel had no room."""
        self.too_big = 0
        """Of :attr:`dropped`, messages over ``max_datagram_bytes``."""
        self._sock: socket.socket | None = None
        self._gauges: dict[str, Any] = {}
        self._said: set[int | str] = set()
        """What has been logged once already (an errno, ``too_big``)."""

    @property
    def address(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{shown}:{self.port}"

    async def start(self) -> None:
        self._gauges = node_gauges()
        sock = socket.socket(self._family, socket.SOCK_DGRAM)
        sock.setblocking(False)
        if self._family == socket.AF_INET:  # a broadcast address is refused without it
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        self._sock = sock
        self._update_gauges()
        log.info("sending results to udp://%s (a msgpack datagram each)", self.address)

    async def process(self, item: Any, lane: str) -> None:
        """Send ``item`` as one datagram, on the event loop; never waits."""
        sock = self._sock
        if sock is None or not is_result(item):
            return
        payload = pack(message_of(item, lane))
        if len(payload) > self.max_datagram_bytes:
            self.too_big += 1
            self.dropped += 1
            self._once(
                "too_big",
                "udp://%s: a %d-byte message is over max_datagram_bytes=%d: dropped (counted in 'dropped'); "
                "raise it or use a TcpStream",
                self.address, len(payload), self.max_datagram_bytes,
            )  # fmt: skip
        else:
            try:
                sock.sendto(payload, self._address)
                self.sent += 1
            except OSError as exc:  # EAGAIN/ENOBUFS: no room; ENETUNREACH: no route, for now
                self.dropped += 1
                self._once(
                    exc.errno or 0, "udp://%s: cannot send (%s): dropped, counted in 'dropped'",
                    self.address, exc.strerror or errno.errorcode.get(exc.errno or 0, exc),
                )  # fmt: skip
        self._update_gauges()

    async def stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _once(self, key: int | str, msg: str, *args: object) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(msg, *args)

    def _update_gauges(self) -> None:
        g = self._gauges
        g["sent"] = self.sent
        g["dropped"] = self.dropped
        g["too_big"] = self.too_big
