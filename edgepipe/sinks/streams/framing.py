"""What the streams share: the framing of a message on TCP, the checks of an address made when a
stream is declared, and where a stream's gauges go.

On TCP every message is a 4-byte big-endian length, then that many bytes: one msgpack map of
the WebRTC data channel's schema (:mod:`edgepipe.wire.messages`, ``v`` 1). On UDP a datagram
is one map, without the length (a datagram has its own).
"""

from __future__ import annotations

import struct
from typing import Any

from edgepipe.core.context import current_node

HEADER = struct.Struct(">I")
"""The length before each message on TCP: 4 bytes, big-endian, the msgpack bytes that follow."""
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""What a reader takes as one message at most: a longer length is a broken stream, not a
message (a reader that trusted it would allocate up to 4 GiB)."""


def framed(payload: bytes) -> bytes:
    """``payload`` with its length before it."""
    return HEADER.pack(len(payload)) + payload


def check_port(port: Any, what: str, *, allow_zero: bool) -> int:
    """``port`` if it is a port number (0, "any free one", only where ``allow_zero``); raises
    ``ValueError`` naming ``what`` otherwise."""
    low = 0 if allow_zero else 1
    if isinstance(port, bool) or not isinstance(port, int) or not low <= port <= 65535:
        free = " (0: any free port)" if allow_zero else ""
        raise ValueError(f"{what}: port must be an integer in {low}..65535{free}, got {port!r}")
    return port


def check_host(host: Any, what: str) -> str:
    """``host`` if it is a non-empty string; raises ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(host, str) or not host.strip():
        raise ValueError(f"{what}: host must be an address or a host name (127.0.0.1, ::1), got {host!r}")
    return host.strip()


def is_result(item: Any) -> bool:
    """Whether ``item`` is a result (a frame on its way to a recorder is not: it says
    ``result = False``), as for ``--results``."""
    return bool(getattr(type(item), "result", True))


def node_gauges() -> dict[str, Any]:
    """The running node's gauges (``--stats``, ``/metrics``); a private dict outside a pipeline."""
    try:
        return current_node().gauges
    except RuntimeError:
        return {}
