"""Streams of results for programs that are not browsers: :class:`TcpStream` (msgpack, each
message after its 4-byte big-endian length, to every client that connects), :class:`UdpStream`
(a msgpack datagram per message, to one address) and :class:`JsonLines` (the lines of
``--results``, in a file rotated by size). Each is a sink::

    from edgepipe.sinks.streams import JsonLines, TcpStream

    p.sink("tcp", TcpStream(port=9000), inputs=[faces, events])
    p.sink("log", JsonLines("results.jsonl", max_bytes=10_000_000, backups=5), inputs=faces)

The msgpack maps are the WebRTC data channel's (:mod:`edgepipe.wire.messages`, schema ``v``
1). :mod:`edgepipe.sinks.streams.client` reads a TCP stream. Loaded on first use: a pipeline
that writes JSON lines only never imports msgpack nor the message schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgepipe.core.lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from edgepipe.sinks.streams.jsonl import JsonLines
    from edgepipe.sinks.streams.tcp import TcpStream
    from edgepipe.sinks.streams.udp import UdpStream

__all__ = ["JsonLines", "TcpStream", "UdpStream"]

_HOMES = {
    "JsonLines": "edgepipe.sinks.streams.jsonl",
    "TcpStream": "edgepipe.sinks.streams.tcp",
    "UdpStream": "edgepipe.sinks.streams.udp",
}


__getattr__, __dir__ = _lazy_exports(__name__, _HOMES)
