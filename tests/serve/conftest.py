"""A real pipeline served on 127.0.0.1 at a free port, with a source that can be made to stall
(ICE on 127.0.0.1 only and the libx264 skip are the whole suite's fixtures: tests/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from edgepipe import Pipeline
from edgepipe.core.context import current_node
from edgepipe.runtime.engine import Runtime
from edgepipe.serve import ServeConfig
from tests.support.viewing import served


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
    async with served(pipeline(camera), None, config or ServeConfig(port=0, stall_after_s=1.0)) as run:
        yield run.url, run.runtime
