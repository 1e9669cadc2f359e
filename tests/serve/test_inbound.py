"""What a viewer sends on a data channel: keyframe requests reach the shared encoder (at most one
per second per viewer), anything else is dropped, counted and logged a little."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgpack
import pytest

from edgepipe.serve.encoder import SharedEncoder
from edgepipe.serve.inbound import KEYFRAME_EVERY_S, MAX_MESSAGE_BYTES, ViewerInbox
from edgepipe.serve.webrtc import Viewers

from .peers import Peer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Encoder:
    """A unit's stand-in for SharedEncoder: counts keyframe requests."""

    def __init__(self) -> None:
        self.requests = 0

    def request_keyframe(self) -> None:
        self.requests += 1


class Track:
    def __init__(self) -> None:
        self.encoder = Encoder()


def pack(message: Any) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def inbox(*sources: str) -> tuple[ViewerInbox, dict[str, Any], Clock]:
    tracks: dict[str, Any] = {s: Track() for s in sources}
    clock = Clock()
    return ViewerInbox("v1", tracks, clock=clock), tracks, clock


def test_a_keyframe_request_reaches_the_encoders_once_per_second() -> None:
    box, tracks, clock = inbox("cam", "door")
    box.receive(pack({"v": 1, "kind": "keyframe"}))
    assert [t.encoder.requests for t in tracks.values()] == [1, 1]
    box.receive(pack({"v": 1, "kind": "keyframe", "source": "door"}))  # too soon
    assert [t.encoder.requests for t in tracks.values()] == [1, 1]
    assert box.ignored == 1
    clock.now += KEYFRAME_EVERY_S
    box.receive(pack({"v": 1, "kind": "keyframe", "source": "door"}))
    assert [t.encoder.requests for t in tracks.values()] == [1, 2]
    assert (box.received, box.keyframes, box.ignored, box.dropped) == (3, 2, 1, 0)


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The inbox's own log records (not, say, aiortc's "Task exception was never retrieved" of a
    peer connection closed in an earlier test, logged when the garbage collector finds it)."""
    return [r for r in caplog.records if r.name == "edgepipe.serve.inbound"]


@pytest.mark.parametrize(
    "data",
    [
        b"", b"\xc1", b"\x91" * 2000 + b"\xc0", pack([1, 2]), pack({"v": 2, "kind": "keyframe"}),
        pack({"v": 1, "kind": "detections"}), pack({"v": 1}), pack({"v": 1, "kind": "keyframe", "source": "nope"}),
        pack({"v": 1, "kind": "keyframe", "source": ["cam"]}), pack({"v": 1, "kind": "keyframe", "pad": "x" * MAX_MESSAGE_BYTES}),
        b"\xdd\xff\xff\xff\xff", "a text message", None,
    ],
)  # fmt: skip
def test_anything_else_is_dropped_and_counted(data: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    box, tracks, _ = inbox("cam")
    box.receive(data)
    assert (box.received, box.dropped, box.keyframes) == (1, 1, 0)
    assert tracks["cam"].encoder.requests == 0
    records = ours(caplog)
    assert len(records) == 1
    assert records[0].getMessage().startswith("viewer v1: message dropped: ")
    assert "\n" not in records[0].getMessage()


def test_a_flood_of_garbage_logs_one_line_per_window(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    box, _, clock = inbox("cam")
    for i in range(1000):
        box.receive(bytes([0xC1, i % 256]))
    assert box.dropped == 1000
    assert len(ours(caplog)) == 1
    clock.now += 10.0
    box.receive(b"\xc1")
    assert ours(caplog)[-1].getMessage().endswith("(999 more like it not logged)")


def test_a_failure_while_handling_costs_one_message_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(dict[str, Any]):
        def values(self) -> Any:
            raise RuntimeError("boom")

    box = ViewerInbox("v1", Broken(cam=Track()))
    box.receive(pack({"v": 1, "kind": "keyframe"}))
    assert box.dropped == 1
    assert "cannot handle it (RuntimeError: boom)" in caplog.text


@pytest.mark.usefixtures("libx264")
async def test_a_real_viewer_asks_for_a_keyframe_on_either_channel() -> None:
    enc = SharedEncoder("cam")
    viewers = Viewers([enc])
    client = Peer()
    own = client.pc.createDataChannel("requests")
    results: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    client.pc.on("datachannel", results.set_result)
    try:
        viewer, answer = await viewers.answer(await client.offer(), "offer")
        await client.pc.setRemoteDescription(answer)
        channel = await asyncio.wait_for(results, 10)
        for _ in range(100):
            if own.readyState == channel.readyState == "open":
                break
            await asyncio.sleep(0.05)
        enc._keyframe_wanted = False
        own.send(pack({"v": 1, "kind": "keyframe", "source": "cam"}))
        own.send(b"garbage")
        channel.send(pack({"v": 1, "kind": "keyframe"}))  # within the second: ignored
        for _ in range(100):
            if viewer.inbox.received == 3:
                break
            await asyncio.sleep(0.05)
        assert (viewer.inbox.keyframes, viewer.inbox.dropped, viewer.inbox.ignored) == (1, 1, 1)
        assert enc._keyframe_wanted
    finally:
        await viewers.close_all()
        await client.pc.close()
