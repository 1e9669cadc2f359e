"""A pipeline served in-process on 127.0.0.1 (``edgepipe run --port 0`` without the command),
a camera pipeline that streams to viewers, and a real aiortc viewer that connects with a JSON
offer: what the serve tests and the shipped pipelines' tests share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiortc import RTCSessionDescription

from edgepipe import Pipeline
from edgepipe.media.frame import Frame
from edgepipe.media.sources.video import VideoSource
from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime.engine import RunReport, Runtime
from edgepipe.serve import HttpServer, ServeConfig
from edgepipe.serve.encoder import WebRTCOut
from edgepipe.serve.webrtc_stream import WebRTCStream
from tests.serve.peers import Peer


class Served:
    """The URL of a served run, its runtime and, once it ended, its report."""

    def __init__(self, url: str, runtime: Runtime) -> None:
        self.url = url
        self.runtime = runtime
        self.report: RunReport | None = None


@asynccontextmanager
async def served(
    pipeline: Pipeline, duration_s: float | None = 60.0, config: ServeConfig | None = None
) -> AsyncIterator[Served]:
    """Run ``pipeline`` with an HTTP server (``config``; default: a free loopback port); stop it
    on exit."""
    server = HttpServer(config or ServeConfig(port=0))
    runtimes: list[Runtime] = []

    async def keep(runtime: Runtime) -> None:
        runtimes.append(runtime)

    async with asyncio.TaskGroup() as tg:
        run = tg.create_task(
            run_async(
                pipeline,
                RunConfig(
                    governed=False, watchers=[keep, server], duration_s=duration_s, drain_timeout_s=1.0
                ),
            )
        )
        await asyncio.wait_for(server.ready.wait(), 10)
        assert server.url is not None
        serving = Served(f"http://127.0.0.1:{server.url.rsplit(':', 1)[1]}", runtimes[0])
        try:
            yield serving
        finally:
            runtimes[0].request_stop()
    serving.report = run.result()


async def connect(url: str, peer: Peer | None = None) -> Peer:
    """A viewer (``peer``, or a new one) connected through ``POST /offer``."""
    peer = peer or Peer()
    offer = {"sdp": await peer.offer(), "type": "offer"}
    async with aiohttp.ClientSession() as http, http.post(f"{url}/offer", json=offer) as r:
        assert r.status == 200, await r.text()
        answer = await r.json()
    await peer.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], answer["type"]))
    return peer


async def messages_of(peer: Peer, kind: str, n: int, timeout_s: float = 20.0) -> list[dict[str, Any]]:
    """The viewer's messages of ``kind`` once it has ``n`` of them (or after ``timeout_s``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        found = [m for m in peer.messages if m["kind"] == kind]
        if len(found) >= n:
            return found
        await asyncio.sleep(0.05)
    return [m for m in peer.messages if m["kind"] == kind]


def camera_pipeline(
    stream: WebRTCStream | None, stage: Callable[[Frame], Any], name: str = "view"
) -> Pipeline:
    """A synthetic 640x360@30 camera streamed to ``stream``'s viewers, with ``stage``'s results
    (a stand-in detector, a stand-in language model) on their data channel; without a stream,
    the camera only."""
    p = Pipeline(name)
    camera = p.source("camera", VideoSource("synthetic://640x360@30"))
    if stream is None:
        p.sink("drop", lambda f: None, inputs=camera, policy="latest", queue_size=1)
        return p
    p.sink("view", stream.video("camera"), inputs=camera, policy="latest", queue_size=1)
    results = p.stage("faces", stage, inputs=camera, policy="latest", queue_size=1)
    p.sink("view_results", stream.results, inputs=results, queue_size=16)
    return p


def video_feeds(pipeline: Pipeline) -> dict[str, tuple[str, ...]]:
    """Per video sink of the pipeline's stream: the nodes feeding it."""
    graph = pipeline.validate()
    return {
        n.node_id: tuple(lane.source for lane in n.lanes)
        for n in graph.nodes
        if isinstance(n.target, WebRTCOut)
    }
