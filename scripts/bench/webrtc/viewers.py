"""The viewers of :mod:`.bench`: N real aiortc peers in one process, each decoding
the video and matching every decoded frame to its ``detections`` message by pts.

    python -m scripts.bench.webrtc.viewers http://127.0.0.1:8080 --viewers 4 --seconds 40 --out out.json

Each viewer offers recvonly video and a data channel of its own (the offer needs SCTP), through
``POST /offer`` (retried until the server answers), and receives the server's ``results``
channel. aiortc decodes the H.264 it receives in ``track.recv()``; a decoded frame's ``pts`` is
its RTP timestamp, counted from the first frame received (``rtp0``). With the ``sync`` message's
``first_pts_90k``, ``pts = first_pts_90k + (rtp - rtp0) mod 2**32``, and the ``detections``
message with that ``pts_90k`` carries the frame's capture time ``t_ms`` (wall clock). Latency =
the wall-clock time the viewer holds the decoded frame - ``t_ms``: both processes run on one
machine, so their wall clocks agree.

Once every viewer has its first frame the process prints ``connected <unix time>`` on stdout
(the benchmark starts its clock there), keeps receiving for ``--seconds``, then writes ``--out``:
``{"connected_at": t, "viewers": [{"frames": [[t_recv, latency_ms or null], ...], "results": n,
"synced": bool}]}`` (``null``: no message for that frame's pts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from edgepipe.serve import ice
from edgepipe.wire import messages

CONNECT_DEADLINE_S = 30.0
"""How long a viewer keeps trying the server (it may still be starting) and waits for video."""


class Viewer:
    """One peer: the frames it decoded (wall time, RTP timestamp) and the capture times the
    ``results`` channel told it (by ``pts_90k``)."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.pc.addTransceiver("video", direction="recvonly")
        self.pc.createDataChannel("client")
        self.frames: list[tuple[float, int]] = []
        self.capture_ms: dict[int, float] = {}
        self.first_pts_90k: int | None = None
        self.bad_messages = 0
        self.track: asyncio.Future[MediaStreamTrack] = asyncio.get_running_loop().create_future()
        self.first_frame = asyncio.Event()
        self.pc.on("track", self._on_track)
        self.pc.on("datachannel", lambda channel: channel.on("message", self._on_message))

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "video" and not self.track.done():
            self.track.set_result(track)

    def _on_message(self, data: bytes | str) -> None:
        try:
            message = messages.unpack(data) if isinstance(data, bytes) else None
        except ValueError:
            message = None
        if message is None:
            self.bad_messages += 1
            return
        kind = message.get("kind")
        if kind == "sync" and self.first_pts_90k is None:
            self.first_pts_90k = int(message["first_pts_90k"])
        elif kind == "detections" and isinstance(message.get("t_ms"), int | float):
            self.capture_ms[int(message["pts_90k"])] = float(message["t_ms"])

    async def connect(self, session: aiohttp.ClientSession, url: str) -> None:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = {"sdp": self.pc.localDescription.sdp, "type": self.pc.localDescription.type}
        deadline = time.monotonic() + CONNECT_DEADLINE_S
        while True:
            try:
                async with session.post(f"{url}/offer", json=offer) as response:
                    if response.status != 200:
                        raise RuntimeError(f"POST /offer: {response.status} {await response.text()}")
                    answer = await response.json()
                    break
            except aiohttp.ClientConnectionError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type=answer["type"]))

    async def receive(self, stop: asyncio.Event) -> None:
        """Decoded frames until ``stop`` is set (or the track ends)."""
        track = await asyncio.wait_for(self.track, CONNECT_DEADLINE_S)
        frames = self.frames
        while not stop.is_set():
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            t_recv = time.time()  # the moment this viewer holds the picture
            if frame.pts is not None:  # aiortc sets every decoded frame's (its RTP timestamp)
                frames.append((t_recv, frame.pts))
            self.first_frame.set()

    def figures(self) -> dict[str, Any]:
        return {"frames": match(self.frames, self.first_pts_90k, self.capture_ms),
                "results": len(self.capture_ms), "synced": self.first_pts_90k is not None,
                "bad_messages": self.bad_messages}  # fmt: skip


def match(
    frames: list[tuple[float, int]], first_pts_90k: int | None, capture_ms: dict[int, float]
) -> list[list[float | None]]:
    """Each received frame ``(t_recv, rtp)`` as ``[t_recv, latency_ms or None]``: its pts is
    ``first_pts_90k + (rtp - rtp0) mod 2**32`` (``rtp0``: the first frame's), and its capture
    time the ``t_ms`` of the message with that pts (None: no such message, or no ``sync``)."""
    out: list[list[float | None]] = []
    rtp0 = frames[0][1] if frames else 0
    for t_recv, rtp in frames:
        t_ms = None if first_pts_90k is None else capture_ms.get(first_pts_90k + (rtp - rtp0) % 2**32)
        out.append([round(t_recv, 4), None if t_ms is None else round(t_recv * 1e3 - t_ms, 2)])
    return out


async def watch(url: str, viewers: int, seconds: float) -> dict[str, Any]:
    ice.restrict_host_addresses()  # honours EDGEPIPE_ICE_HOSTS, as the server does
    peers = [Viewer() for _ in range(viewers)]
    stop = asyncio.Event()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CONNECT_DEADLINE_S)) as session:
            await asyncio.gather(*(p.connect(session, url) for p in peers))
        async with asyncio.TaskGroup() as tg:
            for peer in peers:
                tg.create_task(peer.receive(stop))
            await asyncio.wait_for(asyncio.gather(*(p.first_frame.wait() for p in peers)), CONNECT_DEADLINE_S)
            connected_at = time.time()
            print(f"connected {connected_at:.4f}", flush=True)
            await asyncio.sleep(seconds)
            stop.set()
            for peer in peers:  # a recv() waiting for a frame that will not come ends here
                await peer.pc.close()
    finally:
        for peer in peers:
            await peer.pc.close()
    return {"connected_at": connected_at, "viewers": [p.figures() for p in peers]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the server, e.g. http://127.0.0.1:8080")
    parser.add_argument("--viewers", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=30.0, help="receive this long after connecting")
    parser.add_argument("--out", type=Path, required=True, help="write the frames here (JSON)")
    args = parser.parse_args()
    if args.viewers < 1 or args.seconds <= 0:
        parser.error("--viewers must be at least 1 and --seconds positive")
    figures = asyncio.run(watch(args.url.rstrip("/"), args.viewers, args.seconds))
    args.out.write_text(json.dumps(figures), encoding="utf-8")
    received = [len(v["frames"]) for v in figures["viewers"]]
    print(f"viewers received {received} frames", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
