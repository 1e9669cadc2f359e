"""Fixtures of the serve tests: ICE on 127.0.0.1 only, no STUN, a skip without libx264; and a
real pipeline served on 127.0.0.1 at a free port, with a source that can be made to stall."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import av
import pytest

from edgepipe import Pipeline
from edgepipe.core.context import current_node
from edgepipe.core.run import run_async
from edgepipe.core.runtime import Runtime
from edgepipe.serve import HttpServer, ServeConfig


class Camera:
    """A live source that yields ticks at ``fps`` and stalls (without ending) while paused."""

    def __init__(self, url: str = "rtsp://cam.local/stream", fps: float = 50.0) -> None:
        self.url = url
        self.fps = fps
        self.running = asyncio.Event()
        self.running.set()

    async def __aiter__(self) -> AsyncIterator[int]:
        gauges = current_node().gauges
        gauges["source"] = "live"
        n = 0
        while True:
            await self.running.wait()
            yield n
            n += 1
            gauges["decoded"] = n
            await asyncio.sleep(1 / self.fps)


def pipeline(camera: Camera) -> Pipeline:
    p = Pipeline("served")
    src = p.source("camera", camera)
    doubled = p.stage("double", lambda n: n * 2, inputs=src, policy="latest", queue_size=2)

    async def drop(item: Any) -> None:
        return None

    p.sink("sink", drop, inputs=doubled)
    return p


@asynccontextmanager
async def serving(camera: Camera, config: ServeConfig | None = None) -> AsyncIterator[tuple[str, Runtime]]:
    """Run ``pipeline(camera)`` with an HTTP server; yield its URL (as reached over loopback)."""
    server = HttpServer(config or ServeConfig(port=0, stall_after_s=1.0))
    runtimes: list[Runtime] = []

    async def keep(runtime: Runtime) -> None:
        runtimes.append(runtime)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(run_async(pipeline(camera), watchers=[keep, server], drain_timeout_s=1.0))
        await asyncio.wait_for(server.ready.wait(), 10)
        assert server.url is not None
        port = server.url.rsplit(":", 1)[1]
        try:
            yield f"http://127.0.0.1:{port}", runtimes[0]
        finally:
            runtimes[0].request_stop()


@pytest.fixture(autouse=True)
def loopback_ice(monkeypatch: pytest.MonkeyPatch) -> None:
    # No test reaches the internet: no STUN server, and ICE gathers 127.0.0.1 only (both peers).
    monkeypatch.setenv("EDGEPIPE_ICE_HOSTS", "127.0.0.1")
    monkeypatch.delenv("EDGEPIPE_ICE_SERVERS", raising=False)


@pytest.fixture
def libx264() -> None:
    if "libx264" not in av.codecs_available:
        pytest.skip("libx264 is not available in this PyAV build")
