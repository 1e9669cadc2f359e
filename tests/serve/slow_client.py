"""A viewer in a process of its own, for tests that stop it (SIGSTOP) to make a real stalled peer:
``python tests/serve/slow_client.py URL``. It connects with a JSON offer, reads video and the
``results`` channel, and prints one JSON line per 0.2 s: ``{"viewer": ID, "frames": N,
"messages": M}``. Only 127.0.0.1 is reached (no STUN server)."""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack


async def main(url: str) -> None:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("video", direction="recvonly")
    pc.createDataChannel("client")
    counts = {"frames": 0, "messages": 0}
    tracks: asyncio.Queue[MediaStreamTrack] = asyncio.Queue(1)
    pc.on("track", tracks.put_nowait)

    def on_message(_: object) -> None:
        counts["messages"] += 1

    pc.on("datachannel", lambda channel: channel.on("message", on_message))
    await pc.setLocalDescription(await pc.createOffer())
    async with aiohttp.ClientSession() as http:
        offer = {"sdp": pc.localDescription.sdp, "type": "offer"}
        async with http.post(f"{url}/offer", json=offer) as r:
            r.raise_for_status()
            answer = await r.json()
    await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
    track = await asyncio.wait_for(tracks.get(), 10)

    async def read() -> None:
        while True:
            try:
                await track.recv()
            except MediaStreamError:
                return
            counts["frames"] += 1

    async with asyncio.TaskGroup() as tg:
        reader = tg.create_task(read())
        while not reader.done():
            print(json.dumps({"viewer": answer["viewer"], **counts}), flush=True)
            await asyncio.sleep(0.2)
    await pc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
