"""The baseline server of :mod:`.bench`: the plain aiortc path, one encode per viewer.

    python -m scripts.bench.webrtc.plain --port 8080 --duration 60

What aiortc's own server example does: each viewer gets a frame track (``recv()`` returns an
``av.VideoFrame``) and aiortc's sender encodes it for that viewer alone, with aiortc's settings
(``H264Encoder``: libx264 at x264's default preset, zerolatency, baseline, 1 Mbit/s to start,
then what the viewer's REMB asks), not edgepipe's (``veryfast``, 2 Mbit/s): the plain path as
one gets it, not edgepipe's encoder run once per viewer. The frames are the benchmark's camera: the
same synthetic scene (:class:`edgepipe.media.sources.synthetic.Scene`), 1280x720, paced at 30 fps, drawn
once per frame and shared by every viewer's track (as aiortc's ``MediaRelay`` shares them). No
edgepipe pipeline, no shared encoder: what edgepipe's streaming path is compared with.

The data channel speaks the schema of :mod:`edgepipe.wire.messages` (``sync`` once, then one
``detections`` per frame with its ``pts_90k`` and capture time ``t_ms``), so the same viewers
measure both servers. ``GET /stats`` says how many frames the camera made and how many the
viewers' tracks handed to aiortc to encode.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fractions
import time
from typing import Any

import av
import numpy as np
from aiohttp import web
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcdatachannel import RTCDataChannel

from edgepipe.media.sources.synthetic import Scene
from edgepipe.serve import ice
from edgepipe.wire import messages

WIDTH, HEIGHT, FPS = 1280, 720, 30
TIME_BASE = fractions.Fraction(1, 90_000)
MAX_BUFFERED_BYTES = 256 * 1024


class Camera:
    """The scene drawn at :data:`FPS` into a new ``av.VideoFrame`` each frame (the viewers'
    encoders may still read the previous one). Readers wait for the frame after the one they had."""

    def __init__(self) -> None:
        self.scene = Scene(WIDTH, HEIGHT)
        self.frame: Any = None
        self.seq = -1
        self.t_ms = 0.0
        self._new = asyncio.Event()
        self.viewers: list[PlainViewer] = []

    def _draw(self, i: int) -> Any:
        out = av.VideoFrame(WIDTH, HEIGHT, "nv12")
        y_plane: Any
        uv_plane: Any
        y_plane, uv_plane = out.planes
        y = np.frombuffer(y_plane, np.uint8).reshape(HEIGHT, y_plane.line_size)[:, :WIDTH]
        uv = np.frombuffer(uv_plane, np.uint8).reshape(HEIGHT // 2, uv_plane.line_size)[:, :WIDTH]
        self.scene.draw(i, y, uv.reshape(HEIGHT // 2, WIDTH // 2, 2))
        return out

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        i = 0
        while not stop.is_set():
            frame = await loop.run_in_executor(None, self._draw, i)
            t_capture_ns = time.time_ns()  # as edgepipe's: when the picture is ready
            frame.pts = round(time.monotonic() * 90_000)
            frame.time_base = TIME_BASE
            self.frame, self.seq, self.t_ms = frame, i, t_capture_ns / 1e6
            new, self._new = self._new, asyncio.Event()
            new.set()
            for viewer in list(self.viewers):
                viewer.results(frame.pts, i, self.t_ms)
            i += 1
            await asyncio.sleep(max(0.0, t0 + i / FPS - time.monotonic()))

    async def next_after(self, seq: int) -> tuple[Any, int]:
        while self.seq <= seq:
            await self._new.wait()
        return self.frame, self.seq


class FrameTrack(MediaStreamTrack):
    """One viewer's video: the camera's newest frame, which aiortc encodes for this viewer."""

    kind = "video"

    def __init__(self, camera: Camera, viewer: PlainViewer) -> None:
        super().__init__()
        self.camera, self.viewer = camera, viewer
        self.seq = -1
        self.sent = 0

    async def recv(self) -> Any:
        if self.readyState != "live":
            raise MediaStreamError
        frame, self.seq = await self.camera.next_after(self.seq)
        if self.viewer.first_pts is None:
            self.viewer.first_pts = frame.pts
            self.viewer.send_sync()
        self.sent += 1
        return frame


class PlainViewer:
    def __init__(self, pc: RTCPeerConnection) -> None:
        self.pc = pc
        self.channel: RTCDataChannel | None = None
        self.first_pts: int | None = None
        self.synced = False

    def send_sync(self) -> None:
        if not self.synced and self.first_pts is not None and self._open():
            assert self.channel is not None
            self.channel.send(messages.pack(messages.sync_message("camera", self.first_pts)))
            self.synced = True

    def results(self, pts: int, seq: int, t_ms: float) -> None:
        self.send_sync()
        if not self.synced or not self._open():
            return
        assert self.channel is not None
        if self.channel.bufferedAmount > MAX_BUFFERED_BYTES:
            return
        box = [WIDTH * 0.4, HEIGHT * 0.4, WIDTH * 0.6, HEIGHT * 0.6, 0.9, "face", None]
        self.channel.send(messages.pack({
            "v": messages.SCHEMA_VERSION, "kind": "detections", "source": "camera", "seq": seq,
            "pts_90k": pts, "t_ms": t_ms, "latency_ms": 0.0, "inferred": True, "w": WIDTH, "h": HEIGHT,
            "boxes": [box],
        }))  # fmt: skip

    def _open(self) -> bool:
        return self.channel is not None and self.channel.readyState == "open"


CAMERA = web.AppKey("camera", Camera)
TRACKS = web.AppKey("tracks", list[FrameTrack])


async def offer(request: web.Request) -> web.Response:
    body = await request.json()
    camera = request.app[CAMERA]
    pc = RTCPeerConnection(ice.configuration())
    viewer = PlainViewer(pc)
    track = FrameTrack(camera, viewer)
    transceiver = pc.addTransceiver(track, direction="sendonly")
    h264 = [c for c in RTCRtpSender.getCapabilities("video").codecs if c.mimeType.lower() == "video/h264"]
    transceiver.setCodecPreferences(h264)  # the codec edgepipe sends: x264 on both sides
    await pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type=body["type"]))
    viewer.channel = pc.createDataChannel("results", ordered=True)
    await pc.setLocalDescription(await pc.createAnswer())
    camera.viewers.append(viewer)
    request.app[TRACKS].append(track)
    return web.json_response({"sdp": pc.localDescription.sdp, "type": "answer"})


async def stats(request: web.Request) -> web.Response:
    camera = request.app[CAMERA]
    return web.json_response({"frames": camera.seq + 1, "encodes": sum(t.sent for t in request.app[TRACKS])})


async def serve(port: int, duration_s: float) -> None:
    ice.restrict_host_addresses()
    camera = Camera()
    app = web.Application()
    app[CAMERA], app[TRACKS] = camera, []
    app.router.add_post("/offer", offer)
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    stop = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(camera.run(stop))
            await asyncio.sleep(duration_s)
            stop.set()
    finally:
        for viewer in camera.viewers:
            await viewer.pc.close()
        await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True, help="seconds to serve")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):  # SIGINT: the benchmark is done with it
        asyncio.run(serve(args.port, args.duration))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
