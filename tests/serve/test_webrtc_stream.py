"""WebRTCStream in a served pipeline: VP8 for a peer without H.264 (still encoded once), and
what reaches the data channel besides detections: sources' states, tokens, events."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import av
import pytest
from aiortc import RTCRtpReceiver
from prometheus_client.parser import text_string_to_metric_families

from edgepipe import Message, Pipeline
from edgepipe.core.errors import PipelineError
from edgepipe.media.frame import Frame
from edgepipe.media.sources.video import VideoSource
from edgepipe.serve.webrtc_stream import WebRTCStream, streams_of
from edgepipe.wire import messages
from tests.support.viewing import camera_pipeline, connect, messages_of
from tests.support.viewing import served as serve

from .peers import Peer

pytestmark = pytest.mark.usefixtures("libx264")


class Words:
    """A stand-in language model: a token every 10th frame it sees, an event every 30th."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, frame: Frame) -> Message | None:
        self.n += 1
        if self.n % 30 == 0:
            return Message("event", {"what": "description", "request": self.n // 30, "text": "all quiet"})
        if self.n % 10 == 0:
            return Message("token", {"request": self.n // 30, "text": f" w{self.n}"})
        return None


@asynccontextmanager
async def served(stream: WebRTCStream) -> AsyncIterator[str]:
    async with serve(camera_pipeline(stream, Words()), duration_s=30) as run:
        yield run.url


@pytest.mark.skipif("libvpx" not in av.codecs_available, reason="no libvpx in this PyAV build")
@pytest.mark.slow
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


@pytest.mark.slow
async def test_the_data_channel_carries_states_tokens_and_events() -> None:
    async with served(WebRTCStream()) as url:
        await asyncio.sleep(1.0)  # the camera went live before this viewer came
        peer = Peer()
        await connect(url, peer)
        await peer.frames(5)
        tokens = await messages_of(peer, "token", 3)
        events = await messages_of(peer, "event", 1)
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


@pytest.mark.slow
def test_a_stream_without_a_server_loads_no_web_stack() -> None:
    # A pipeline that declares a stream but runs without --port pays for none of it (~30 MB).
    code = (
        "import sys\n"
        "from edgepipe.serve.webrtc_stream import WebRTCStream\n"
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
    async with serve(camera_pipeline(WebRTCStream(), probe), duration_s=30) as run:
        peer = await connect(run.url)
        await peer.frames(3)
        errors = await messages_of(peer, "error", 2)
        await peer.pc.close()
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
