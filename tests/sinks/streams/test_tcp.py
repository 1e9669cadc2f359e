"""TcpStream with real sockets on 127.0.0.1: framing, order, slow and leaving clients, tokens."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from edgepipe import Message, Pipeline
from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime.engine import RunReport
from edgepipe.sinks.streams import TcpStream
from edgepipe.sinks.streams.client import messages, read_messages
from edgepipe.sinks.streams.framing import HEADER
from edgepipe.testing import run_pipeline
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire.messages import message_of, unpack
from tests.sinks.waiting import until

pytestmark = pytest.mark.timeout(60)


def numbered(stream: TcpStream, n: int, *, clients: int, pad: int = 0) -> Any:
    """A source of ``n`` numbered events, begun once ``clients`` clients are connected."""

    async def source() -> AsyncIterator[Message]:
        await until(lambda: stream.clients >= clients)
        for i in range(n):
            yield Message("event", {"n": i, "pad": "x" * pad})

    return source


def pipeline(stream: TcpStream, source: Any) -> Pipeline:
    p = Pipeline("tcp")
    events = p.source("events", source)
    p.sink("tcp", stream, inputs=events, queue_size=64)
    return p


def split(data: bytes) -> list[dict[str, Any]]:
    """Messages out of a stream's bytes: a 4-byte big-endian length, then that much msgpack."""
    messages, offset = [], 0
    while offset < len(data):
        (length,) = HEADER.unpack_from(data, offset)
        messages.append(unpack(data[offset + 4 : offset + 4 + length]))
        offset += 4 + length
    assert offset == len(data), "the stream ends inside a message"
    return messages


async def collect(port: int, token: str | None = None) -> list[dict[str, Any]]:
    return [m async for m in messages("127.0.0.1", port, token=token)]


async def test_two_clients_get_every_message_in_order_framed() -> None:
    stream = TcpStream(port=0)
    first = asyncio.create_task(collect(stream.port))
    raw_reader, raw_writer = await asyncio.open_connection("127.0.0.1", stream.port)
    report = await run_async(pipeline(stream, numbered(stream, 300, clients=2)), RunConfig(governed=False))
    got = await first
    raw = await raw_reader.read()  # to the end: the stream closes when the pipeline stops
    raw_writer.close()

    assert [m["n"] for m in got] == list(range(300))
    assert got[0] == message_of(Message("event", {"n": 0, "pad": ""}), "events")
    assert {(m["v"], m["kind"], m["node"]) for m in got} == {(1, "event", "events")}
    assert split(raw) == got  # the second client's bytes, split by hand
    gauges = report.stats.node("tcp").gauges
    assert gauges == {"clients": 0, "sent": 600, "dropped": 0, "refused": 0}


async def test_detections_go_as_the_data_channel_sends_them() -> None:
    stream = TcpStream(port=0)
    dets = Detections("cam", 7, 0, 0.0, 640, 360, "m", [Detection((1.0, 2.0, 30.0, 40.0), 0.9, 0, "face")])

    async def source() -> AsyncIterator[Detections]:
        await until(lambda: stream.clients >= 1)
        yield dets

    task = asyncio.create_task(collect(stream.port))
    await run_async(pipeline(stream, source), RunConfig(governed=False))
    (got,) = await task
    assert got == message_of(dets)
    assert got["boxes"] == [[1.0, 2.0, 30.0, 40.0, 0.9, "face", None]]
    assert (got["kind"], got["source"], got["seq"]) == ("detections", "cam", 7)


@pytest.mark.slow
async def test_a_client_that_never_reads_loses_messages_the_other_does_not() -> None:
    stream = TcpStream(port=0, buffer_bytes=16 * 1024)
    stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little for it
    stuck.connect(("127.0.0.1", stream.port))
    reader = asyncio.create_task(collect(stream.port))
    n = 3000  # ~3 MB: far more than the stuck client's buffers
    try:
        report = await run_async(
            pipeline(stream, numbered(stream, n, clients=2, pad=1000)), RunConfig(governed=False)
        )
        # The run ended with every message taken by the sink while one client read nothing at
        # all: it never waited for that client.
        assert report.stats.node("tcp").items_in == n
        got = await reader
    finally:
        stuck.close()
    assert [m["n"] for m in got] == list(range(n))
    gauges = report.stats.node("tcp").gauges
    assert 0 < stream.dropped < n
    assert gauges["dropped"] == stream.dropped
    assert gauges["sent"] + gauges["dropped"] == 2 * n


async def test_a_client_that_leaves_is_dropped_and_the_rest_go_on() -> None:
    stream = TcpStream(port=0)
    leaver_reader, leaver_writer = await asyncio.open_connection("127.0.0.1", stream.port)
    stayer = asyncio.create_task(collect(stream.port))
    left = asyncio.Event()

    async def source() -> AsyncIterator[Message]:
        await until(lambda: stream.clients >= 2)
        for i in range(100):
            if i == 50:
                await left.wait()
                await until(lambda: stream.clients == 1)  # seen by the stream
            yield Message("event", {"n": i})

    async def leave() -> None:
        async for _ in read_messages(leaver_reader):
            break
        leaver_writer.close()
        left.set()

    leaving = asyncio.create_task(leave())
    report = await run_async(pipeline(stream, source), RunConfig(governed=False))
    await leaving
    assert [m["n"] for m in await stayer] == list(range(100))
    tcp = report.stats.node("tcp")
    assert (tcp.errors, tcp.gauges["clients"], tcp.gauges["dropped"]) == (0, 0, 0)


async def test_a_token_is_asked_of_clients_when_given() -> None:
    stream = TcpStream(port=0, token="s3cret-token")
    wrong_reader, wrong_writer = await asyncio.open_connection("127.0.0.1", stream.port)
    wrong_writer.write(b"not-the-token\n")
    right = asyncio.create_task(collect(stream.port, token="s3cret-token"))
    report = await run_async(pipeline(stream, numbered(stream, 5, clients=1)), RunConfig(governed=False))
    assert [m["n"] for m in await right] == list(range(5))
    assert await wrong_reader.read() == b""  # closed, sent nothing
    wrong_writer.close()
    assert report.stats.node("tcp").gauges["refused"] == 1


async def test_clients_past_max_clients_are_refused() -> None:
    stream = TcpStream(port=0, max_clients=1)
    # Both wait in the listening socket's queue until the run starts, and are taken in order.
    first_reader, first_writer = await asyncio.open_connection("127.0.0.1", stream.port)
    extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", stream.port)

    async def source() -> AsyncIterator[Message]:
        await until(lambda: stream.refused >= 1)
        yield Message("event", {"n": 0})

    report = await run_async(pipeline(stream, source), RunConfig(governed=False))
    assert [m["n"] async for m in read_messages(first_reader)] == [0]
    assert await extra_reader.read() == b""
    first_writer.close()
    extra_writer.close()
    assert report.stats.node("tcp").gauges["refused"] == 1


def test_not_loopback_without_a_token_is_refused_before_listening(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGEPIPE_TOKEN", raising=False)
    with pytest.raises(ValueError, match=r"0\.0\.0\.0 \(not loopback\) needs a token: set \$EDGEPIPE_TOKEN"):
        TcpStream(port=0, host="0.0.0.0")
    with pytest.raises(ValueError, match="at least 8 characters"):
        TcpStream(port=0, token="short")


@pytest.mark.parametrize("port", [-1, 65536, "9000", 9000.0, True, None])
def test_a_bad_port_is_refused(port: Any) -> None:
    with pytest.raises(ValueError, match=r"TcpStream: port must be an integer in 0\.\.65535"):
        TcpStream(port=port)


def test_a_port_in_use_is_refused_at_declaration() -> None:
    first = TcpStream(port=0)
    try:
        with pytest.raises(ValueError, match=rf"TcpStream: cannot listen on 127\.0\.0\.1:{first.port}: "):
            TcpStream(port=first.port)
    finally:
        first.close()


async def test_a_stream_without_clients_packs_nothing_and_restarts_on_its_port() -> None:
    stream = TcpStream(port=0)
    port = stream.port
    report: RunReport = await run_async(
        pipeline(stream, [Message("event", {"n": i}) for i in range(3)]), RunConfig(governed=False)
    )
    assert report.stats.node("tcp").gauges["sent"] == 0

    # Run again (a restart's start() after stop()): the same port is taken again.
    async def connect_when_listening() -> list[dict[str, Any]]:
        while True:
            try:
                return await collect(port)
            except ConnectionRefusedError:
                await asyncio.sleep(0.02)

    task = asyncio.create_task(connect_when_listening())
    await run_async(pipeline(stream, numbered(stream, 2, clients=1)), RunConfig(governed=False))
    assert [m["n"] for m in await task] == [0, 1]
    assert stream.port == port


def test_the_stream_runs_on_uvloop_as_edgepipe_run_does() -> None:
    pytest.importorskip("uvloop")
    stream = TcpStream(port=0)
    with socket.create_connection(("127.0.0.1", stream.port)) as sock:
        # Ten small messages fit in the socket's buffers: read once the run has ended.
        report = run_pipeline(
            pipeline(stream, numbered(stream, 10, clients=1)), RunConfig(governed=False, loop="uvloop")
        )
        data = sock.makefile("rb").read()
    assert report.stats.node("tcp").gauges["sent"] == 10
    assert [m["n"] for m in split(data)] == list(range(10))
