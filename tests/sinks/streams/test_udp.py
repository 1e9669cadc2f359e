"""UdpStream: datagrams received by a real socket on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from edgepipe import Message, Pipeline
from edgepipe.runner import RunConfig
from edgepipe.sinks.streams import UdpStream
from edgepipe.testing import FakeSource, run_pipeline
from edgepipe.wire.messages import message_of, unpack

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def receiver() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    yield sock
    sock.close()


def received(sock: socket.socket) -> list[bytes]:
    out = []
    sock.setblocking(False)
    while True:
        try:
            out.append(sock.recv(70000))
        except BlockingIOError:
            return out


def run(stream: UdpStream, items: list[Any]) -> Any:
    p = Pipeline("udp")
    p.sink("udp", stream, inputs=p.source("events", FakeSource(items)))
    return run_pipeline(p, RunConfig(governed=False))


def test_each_message_is_one_datagram(receiver: socket.socket) -> None:
    items = [Message("event", {"n": i}) for i in range(50)]
    report = run(UdpStream("127.0.0.1", receiver.getsockname()[1]), items)
    datagrams = received(receiver)
    assert [unpack(d) for d in datagrams] == [message_of(m, "events") for m in items]
    assert report.stats.node("udp").gauges == {"sent": 50, "dropped": 0, "too_big": 0}


def test_a_message_over_the_datagram_size_is_dropped_and_counted(receiver: socket.socket) -> None:
    items = [
        Message("event", {"n": 0}),
        Message("event", {"n": 1, "text": "x" * 300}),
        Message("event", {"n": 2}),
    ]
    stream = UdpStream("127.0.0.1", receiver.getsockname()[1], max_datagram_bytes=200)
    report = run(stream, items)
    assert [unpack(d)["n"] for d in received(receiver)] == [0, 2]
    assert report.stats.node("udp").gauges == {"sent": 2, "dropped": 1, "too_big": 1}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("127.0.0.1", 0), r"UdpStream: port must be an integer in 1\.\.65535"),
        (("127.0.0.1", 70000), r"UdpStream: port must be an integer in 1\.\.65535"),
        (("", 9000), "UdpStream: host must be an address"),
        (("127.0.0.1", 9000, 0), r"max_datagram_bytes must be an integer in 1\.\.65507"),
        (("127.0.0.1", 9000, 65508), r"max_datagram_bytes must be an integer in 1\.\.65507"),
    ],
)
def test_bad_declarations_are_refused(args: tuple[Any, ...], error: str) -> None:
    host, port, *size = args
    with pytest.raises(ValueError, match=error):
        UdpStream(host, port, **({"max_datagram_bytes": size[0]} if size else {}))
