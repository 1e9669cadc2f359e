"""A viewer for tests that watch over time: it keeps reading its track (arrival time and pts of
every frame) and holds the channels it can send on (the server's ``results`` and its own)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiortc import RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcdatachannel import RTCDataChannel

from .peers import Peer


class Watcher(Peer):
    """A viewer that keeps reading its track (pts and arrival time of every frame) and holds
    the channels it can send on: the server's ``results`` and one of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.own = self.pc.createDataChannel("own")
        self.results_channel: asyncio.Future[RTCDataChannel] = asyncio.get_running_loop().create_future()
        self.pc.on("datachannel", self.results_channel.set_result)
        self.received: list[tuple[float, int]] = []

    async def connect(self, http: aiohttp.ClientSession, url: str) -> str:
        async with http.post(f"{url}/offer", json={"sdp": await self.offer(), "type": "offer"}) as r:
            assert r.status == 200, await r.text()
            answer = await r.json()
        await self.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
        return str(answer["viewer"])

    async def read(self) -> None:
        track = await asyncio.wait_for(self.track, 10)
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:  # the server ended this viewer (DELETE /whep/ID)
                return
            self.received.append((time.monotonic(), frame.pts))

    async def frames_after(self, t: float, n: int, within_s: float = 20) -> list[int]:
        deadline = time.monotonic() + within_s
        while len(got := [pts for at, pts in self.received if at > t]) < n:
            assert time.monotonic() < deadline, f"{len(got)} frames after t in {within_s} s"
            await asyncio.sleep(0.05)
        return got
