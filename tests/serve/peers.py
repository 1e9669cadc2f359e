"""A viewer for the tests: a real aiortc peer, recvonly video, a data channel of its own (so the
offer has SCTP), and the server's ``results`` channel collected as decoded messages."""

from __future__ import annotations

import asyncio
from typing import Any

from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import MediaStreamTrack

from edgepipe.serve import ice
from edgepipe.wire import messages


class Peer:
    def __init__(self) -> None:
        # This peer gathers what EDGEPIPE_ICE_HOSTS says too (127.0.0.1 in the tests), even when
        # it makes its offer before any server of this process has put the rule in place.
        ice.restrict_host_addresses()
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.pc.addTransceiver("video", direction="recvonly")
        self.channel = self.pc.createDataChannel("client")
        self.messages: list[dict[str, Any]] = []
        self.track: asyncio.Future[MediaStreamTrack] = asyncio.get_running_loop().create_future()
        self.pc.on("track", self.track.set_result)
        self.pc.on(
            "datachannel", lambda ch: ch.on("message", lambda m: self.messages.append(messages.unpack(m)))
        )

    async def offer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        return str(self.pc.localDescription.sdp)

    async def frames(self, n: int) -> list[Any]:
        track = await asyncio.wait_for(self.track, 10)
        return [await asyncio.wait_for(track.recv(), 10) for _ in range(n)]

    async def results(self, n: int) -> None:
        """Until ``n`` detection messages arrived (or 5 s)."""
        for _ in range(100):
            if sum(m["kind"] == "detections" for m in self.messages) >= n:
                return
            await asyncio.sleep(0.05)
