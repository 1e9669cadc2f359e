"""WebRTCStream in a served pipeline: VP8 for a peer without H.264 (still encoded once), and
what reaches the data channel besides detections: sources' states, tokens, events."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import av
import pytest
from aiortc import RTCRtpReceiver, RTCSessionDescription
from prometheus_client.parser import text_string_to_metric_families

from edgepipe import Message, Pipeline
from edgepipe.core.errors import PipelineError
from edgepipe.core.run import run_async
from edgepipe.media.frame import Frame
from edgepipe.media.source import VideoSource
from edgepipe.serve import HttpServer, ServeConfig, messages
from edgepipe.serve.stream import WebRTCStream, streams_of

from .peers import Peer

pytestmark = pytest.mark.usefixtures("libx264")


def words(frame: Frame) -> Message | None:
    """A stand-in language model: a token every 10th frame, an event every 30th."""
    if frame.seq % 30 == 29:
        return Message("event", {"what": "description", "request": frame.seq // 30, "text": "all quiet"})
    if frame.seq % 10 == 0:
        return Message("token", {"request": frame.seq // 30, "text": f" w{frame.seq}"})
    return None


@asynccontextmanager
async def served(stream: WebRTCStream) -> AsyncIterator[str]:
    p = Pipeline("view")
    camera = p.source("camera", VideoSource("synthetic://640x360@30"))
    p.sink("view", stream.video("camera"), inputs=camera, policy="latest", queue_size=1)
    said = p.stage("words", words, inputs=camera, queue_size=4)
    p.sink("view_results", stream.results, inputs=said, queue_size=16, blocking=False)
    server = HttpServer(ServeConfig(port=0))
    async with asyncio.TaskGroup() as tg:
        run = tg.create_task(run_async(p, watchers=[server], duration_s=30, drain_timeout_s=1.0))
        await asyncio.wait_for(server.ready.wait(), 10)
        assert server.url is not None
        try:
            yield f"http://127.0.0.1:{server.url.rsplit(':', 1)[1]}"
        finally:
            run.cancel()


async def connect(url: str, peer: Peer) -> None:
    offer = {"sdp": await peer.offer(), "type": "offer"}
    async with aiohttp.ClientSession() as http, http.post(f"{url}/offer", json=offer) as r:
        assert r.status == 200, await r.text()
        answer = await r.json()
    await peer.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))


async def wait_for_messages(peer: Peer, kind: str, n: int) -> list[dict[str, Any]]:
    for _ in range(200):
        found = [m for m in peer.messages if m["kind"] == kind]
        if len(found) >= n:
            return found
        await asyncio.sleep(0.05)
    return [m for m in peer.messages if m["kind"] == kind]


@pytest.mark.skipif("libvpx" not in av.codecs_available, reason="no libvpx in this PyAV build")
async def test_a_peer_without_h264_gets_vp8_encoded_once_for_all() -> None:
    stream = WebRTCStream()
    vp8 = [c for c in RTCRtpReceiver.getCapabilities("video").codecs if c.mimeType.lower() == "video/vp8"]
    peers = [Peer(), Peer()]
    for peer in peers:
        (transceiver,) = peer.pc.getTransceivers()
        transceiver.setCodecPreferences(vp8)  # an offer with VP8 only
    async with served(stream) as url:
        for peer in peers:
            await connect(url, peer)
        got = await asyncio.gather(*(peer.frames(30) for peer in peers))
        for peer in peers:
            await peer.pc.close()
    assert [len(frames) for frames in got] == [30, 30]
    assert {(f.width, f.height) for frames in got for f in frames} == {(640, 360)}
    h264, fallback = stream.viewers.encoders["camera"], stream.viewers.fallback["camera"]
    assert fallback.codec == "libvpx"
    assert h264.encodes == 0, "no H.264 viewer: the H.264 encoder stays idle"
    # two viewers, one VP8 encode per frame: at most as many encodes as frames the camera made
    assert 30 <= fallback.encodes <= 30 * 12


async def test_the_data_channel_carries_states_tokens_and_events() -> None:
    async with served(WebRTCStream()) as url:
        await asyncio.sleep(1.0)  # the camera went live before this viewer came
        peer = Peer()
        await connect(url, peer)
        await peer.frames(5)
        tokens = await wait_for_messages(peer, "token", 3)
        events = await wait_for_messages(peer, "event", 1)
        peer.channel.send(messages.pack({"v": 1, "kind": "keyframe"}))
        peer.channel.send(b"\xc1 not msgpack")
        await asyncio.sleep(1.0)  # /metrics reads a snapshot at most 0.5 s old
        async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
            families = {f.name: f for f in text_string_to_metric_families(await r.text())}
        await peer.pc.close()
    states = [m for m in peer.messages if m["kind"] == "source_state"]
    # a viewer that joins later is told each source's latest state, with the node that said it
    assert states[0] == {"v": 1, "kind": "source_state", "node": "camera", "source": "camera", "state": "live",
                         "reason": ""}  # fmt: skip
    assert len(tokens) >= 3
    assert all(t["text"].startswith(" w") and isinstance(t["request"], int) for t in tokens)
    assert events[0]["what"] == "description"
    assert events[0]["text"] == "all quiet"
    # /metrics has the viewers' side too (serve/stream_metrics.py)
    assert families["edgepipe_webrtc_viewers"].samples[0].value == 1
    encodes = {s.labels["codec"]: s.value for s in families["edgepipe_webrtc_encodes"].samples}
    assert encodes["h264"] >= 5
    assert encodes["vp8"] == 0
    assert families["edgepipe_webrtc_messages_sent"].samples[0].value >= len(tokens) + len(events)
    inbound = {s.labels["outcome"]: s.value for s in families["edgepipe_webrtc_viewer_messages"].samples}
    assert inbound == {"keyframe": 1, "ignored": 0, "dropped": 1}


def test_a_stream_without_a_server_loads_no_web_stack() -> None:
    # A pipeline that declares a stream but runs without --port pays for none of it (~30 MB).
    code = (
        "import sys\n"
        "from edgepipe.serve.stream import WebRTCStream\n"
        "stream = WebRTCStream()\n"
        "out = stream.video('camera')\n"
        "stream.results({'kind': 'x'})\n"
        "print(sorted(m for m in ('aiortc', 'aiohttp', 'prometheus_client') if m in sys.modules))\n"
        "stream.viewers\n"
        "print('aiortc' in sys.modules)\n"
    )
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert lines.split("\n")[:2] == ["[]", "True"]


def probe(frame: Frame) -> None:
    raise ConnectionError("cannot reach rtsp://admin:hunter2pw@192.0.2.10/stream: timed out")


async def test_a_password_in_an_error_never_reaches_a_viewer() -> None:
    p = Pipeline("leak")
    camera = p.source("camera", VideoSource("synthetic://320x240@30"))
    stream = WebRTCStream()
    p.sink("view", stream.video("camera"), inputs=camera, policy="latest", queue_size=1)
    p.stage("probe", probe, inputs=camera, policy="latest", queue_size=1)
    server = HttpServer(ServeConfig(port=0))
    peer = Peer()
    async with asyncio.TaskGroup() as tg:
        run = tg.create_task(run_async(p, watchers=[server], duration_s=30, drain_timeout_s=1.0))
        await asyncio.wait_for(server.ready.wait(), 10)
        assert server.url is not None
        await connect(f"http://127.0.0.1:{server.url.rsplit(':', 1)[1]}", peer)
        await peer.frames(3)
        errors = await wait_for_messages(peer, "error", 2)
        await peer.pc.close()
        run.cancel()
    assert errors, "the node's errors reach the viewer"
    assert all("hunter2pw" not in str(m) for m in peer.messages)
    assert "admin:***@192.0.2.10" in errors[0]["message"]


def test_a_pipeline_feeds_one_stream_not_two() -> None:
    p = Pipeline("two")
    camera = p.source("camera", VideoSource("synthetic://320x240@30"))
    p.sink("a", WebRTCStream().video("camera"), inputs=camera, policy="latest", queue_size=1)
    p.sink("b", WebRTCStream().video("camera"), inputs=camera, policy="latest", queue_size=1)
    with pytest.raises(PipelineError, match="feeds 2 WebRTCStream objects; use one"):
        streams_of(p.validate())
