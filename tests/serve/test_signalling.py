"""A real aiortc peer connects to a running pipeline over HTTP: JSON /offer and WHEP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiortc import RTCSessionDescription

from edgepipe.media.frame import Frame
from edgepipe.serve.webrtc_stream import WebRTCStream
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire import messages
from tests.support.viewing import camera_pipeline
from tests.support.viewing import served as serve

from .peers import Peer

pytestmark = pytest.mark.usefixtures("libx264")
BOX = (10.0, 20.0, 110.0, 220.0)
produced: list[tuple[int, tuple[float, ...]]] = []


def detector(frame: Frame) -> Detections:
    """A stand-in detector whose every result is remembered (pts, box) to compare with."""
    box = (BOX[0] + frame.seq % 50, *BOX[1:])
    dets = Detections(source_id=frame.source_id, seq=frame.seq, pts=frame.pts, time_s=frame.time_s,
                      width=frame.width, height=frame.height, model="fake", t_decoded_ns=frame.t_decoded_ns,
                      items=[Detection(box=box, score=0.5, class_id=0, label="face")])  # fmt: skip
    produced.append((messages.pts_90k(frame.t_decoded_ns), box))
    return dets


@asynccontextmanager
async def served(stream: WebRTCStream | None) -> AsyncIterator[str]:
    async with serve(camera_pipeline(stream, detector), duration_s=30) as run:
        yield run.url


class Viewer(Peer):
    async def watch(self, frames: int, results: int) -> list[Any]:
        got = await self.frames(frames)
        await self.results(results)
        return got


def check_results(viewer: Viewer, frames: list[Any]) -> None:
    sync = next(m for m in viewer.messages if m["kind"] == "sync")
    dets = [m for m in viewer.messages if m["kind"] == "detections"]
    assert len(dets) >= 10
    made = dict(produced)
    for d in dets:  # the boxes are the detector's own, for the frame of that pts
        assert d["boxes"] == [[*made[d["pts_90k"]], 0.5, "face", None]]
    received = {sync["first_pts_90k"] + (f.pts - frames[0].pts) % 2**32 for f in frames}
    assert {d["pts_90k"] for d in dets} & received, "results map onto frames the viewer received"


@pytest.mark.slow
async def test_a_viewer_connects_with_a_json_offer() -> None:
    produced.clear()
    async with served(WebRTCStream()) as url, aiohttp.ClientSession() as http:
        viewer = Viewer()
        async with http.post(f"{url}/offer", json={"sdp": await viewer.offer(), "type": "offer"}) as r:
            assert r.status == 200, await r.text()
            answer = await r.json()
        assert answer["type"] == "answer"
        await viewer.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
        frames = await viewer.watch(30, 10)
        await viewer.pc.close()
    assert len(frames) == 30
    assert frames[0].width == 640
    check_results(viewer, frames)


@pytest.mark.slow
async def test_a_viewer_connects_through_whep_and_leaves_with_delete() -> None:
    produced.clear()
    async with served(WebRTCStream(limit=1)) as url, aiohttp.ClientSession() as http:
        viewer = Viewer()
        headers = {"Content-Type": "application/sdp"}
        async with http.post(f"{url}/whep", data=await viewer.offer(), headers=headers) as r:
            assert r.status == 201, await r.text()
            assert r.content_type == "application/sdp"
            location = r.headers["Location"]
            answer = await r.text()
        # unguessable: the id is what ends the viewer (not v1, v2 … for anyone to DELETE)
        assert len(location.removeprefix("/whep/")) >= 16
        await viewer.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        frames = await viewer.watch(30, 10)
        other = Viewer()  # the limit is one viewer: a second one is turned away
        async with http.post(f"{url}/whep", data=await other.offer(), headers=headers) as r:
            assert r.status == 503
        async with http.delete(f"{url}{location}") as r:
            assert r.status == 200
        async with http.delete(f"{url}{location}") as r:
            assert r.status == 404
        await viewer.pc.close()
        await other.pc.close()
    check_results(viewer, frames)


@pytest.mark.parametrize(
    "body",
    ['{"sdp": 1, "type": "offer"}', '{"type": "offer"}', "[]", '{"sdp": "hello", "type": "offer"}', "{"],
)
async def test_a_malformed_offer_is_400_and_the_server_goes_on(body: str) -> None:
    async with served(WebRTCStream()) as url, aiohttp.ClientSession() as http:
        async with http.post(f"{url}/offer", data=body, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400
        async with http.get(f"{url}/graph") as r:
            assert r.status == 200


async def test_a_pipeline_without_a_stream_answers_404() -> None:
    async with (
        served(None) as url,
        aiohttp.ClientSession() as http,
        http.post(f"{url}/offer", json={"sdp": "v=0", "type": "offer"}) as r,
    ):
        assert r.status == 404
        assert "streams no video" in await r.text()
