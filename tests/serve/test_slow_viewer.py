"""A viewer that stops reading does not slow anyone: a real aiortc viewer in a process of its own
is frozen (SIGSTOP) for a few seconds while another watches in this process. Its data channel
backs up to ``max_buffered_bytes`` and then loses messages; the source, the encoder and the
healthy viewer go on at the same rate; nothing queues for it without bound."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edgepipe import Pipeline
from edgepipe.media.frame import Frame
from edgepipe.media.sources.video import VideoSource
from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime.engine import Runtime
from edgepipe.serve import HttpServer, ServeConfig, consent
from edgepipe.serve.webrtc import Viewer
from edgepipe.serve.webrtc_stream import WebRTCStream
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire import messages

from .watcher import Watcher

pytestmark = [pytest.mark.usefixtures("libx264"), pytest.mark.slow, pytest.mark.timeout(120)]
CLIENT = Path(__file__).with_name("slow_client.py")
MAX_BUFFERED = 16 * 1024
STALL_S = 6.0


def detector(frame: Frame) -> Detections:
    """40 boxes a frame: about 1 KiB a message, so a stalled channel fills within a second."""
    items = [
        Detection(box=(i, i, i + 10.5, i + 20.25), score=0.5, class_id=0, label="face") for i in range(40)
    ]
    return Detections(source_id=frame.source_id, seq=frame.seq, pts=frame.pts, time_s=frame.time_s,
                      width=frame.width, height=frame.height, model="fake", t_decoded_ns=frame.t_decoded_ns,
                      items=items)  # fmt: skip


@asynccontextmanager
async def served(stream: WebRTCStream) -> AsyncIterator[tuple[str, Runtime]]:
    p = Pipeline("watched")
    camera = p.source("camera", VideoSource("synthetic://320x240@30"))
    p.sink("view", stream.video("camera"), inputs=camera, policy="latest", queue_size=1)
    faces = p.stage("faces", detector, inputs=camera, policy="latest", queue_size=1)
    p.sink("view_results", stream.results, inputs=faces, queue_size=16)
    server = HttpServer(ServeConfig(port=0))
    runtimes: list[Runtime] = []

    async def keep(runtime: Runtime) -> None:
        runtimes.append(runtime)

    async with asyncio.TaskGroup() as tg:
        run = tg.create_task(
            run_async(p, RunConfig(governed=False, watchers=[keep, server], drain_timeout_s=1.0))
        )
        await asyncio.wait_for(server.ready.wait(), 10)
        assert server.url is not None
        try:
            yield f"http://127.0.0.1:{server.url.rsplit(':', 1)[1]}", runtimes[0]
        finally:
            run.cancel()


class Client:
    """The viewer in another process, and what it last said it received."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.last: dict[str, Any] = {}

    async def follow(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.last = json.loads(line)

    async def until(self, frames: int, within_s: float = 20) -> None:
        deadline = time.monotonic() + within_s
        while self.last.get("frames", 0) < frames:
            assert time.monotonic() < deadline, f"the client says {self.last} after {within_s} s"
            await asyncio.sleep(0.05)


class Window:
    """Counters over a span of time: the source's items, the healthy viewer's frames and
    messages, the stalled viewer's server-side figures."""

    def __init__(self, runtime: Runtime, healthy: Watcher, fine: Viewer, stalled: Viewer) -> None:
        self.figures = lambda: {
            "source": runtime.snapshot().node("camera").items_out,
            "frames": len(healthy.received),
            "messages": len(healthy.messages),
            "fine_dropped": fine.dropped_messages,
            "frozen_sent": stalled.sent_messages,
            "frozen_dropped": stalled.dropped_messages,
            "frozen_packets": stalled.tracks["camera"].sent,
        }
        self.start = self.figures()
        self.t0 = time.monotonic()
        self.max_buffered = 0
        self.channel = stalled.channel

    async def watch(self, seconds: float) -> dict[str, float]:
        """Per-second rates over ``seconds``, sampling the stalled channel's buffered amount."""
        while time.monotonic() - self.t0 < seconds:
            assert self.channel is not None
            self.max_buffered = max(self.max_buffered, self.channel.bufferedAmount)
            await asyncio.sleep(0.02)
        end, elapsed = self.figures(), time.monotonic() - self.t0
        return {k: (end[k] - self.start[k]) / elapsed for k in end}


async def test_a_frozen_viewer_loses_messages_and_slows_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    # Frozen longer than the silence that ends a viewer (edgepipe/serve/consent.py): here it is a
    # viewer that falls behind, not one that is gone.
    monkeypatch.setattr(consent, "SILENCE_S", 30.0)
    stream = WebRTCStream()
    viewers = stream.viewers
    viewers.max_buffered_bytes = MAX_BUFFERED  # each viewer's channel limit, taken when it joins
    async with served(stream) as (url, runtime), asyncio.TaskGroup() as tg:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(CLIENT), url, stdout=asyncio.subprocess.PIPE
        )
        client = Client(proc)
        follower = tg.create_task(client.follow())
        healthy = Watcher()
        reader: asyncio.Task[None] | None = None
        try:
            async with aiohttp.ClientSession() as http:
                healthy_id = await healthy.connect(http, url)
            reader = tg.create_task(healthy.read())
            await client.until(frames=20)
            await healthy.frames_after(0, 20)
            frozen, fine = viewers.viewers[client.last["viewer"]], viewers.viewers[healthy_id]

            before = await Window(runtime, healthy, fine, frozen).watch(3.0)
            proc.send_signal(signal.SIGSTOP)
            try:
                window = Window(runtime, healthy, fine, frozen)
                during = await window.watch(STALL_S)
            finally:
                proc.send_signal(signal.SIGCONT)
            resumed_at = client.last.get("frames", 0)
            await asyncio.sleep(0.5)  # its last line before the freeze may still be in the pipe
            await client.until(frames=resumed_at + 10)  # frozen, not broken: it watches again
            assert len(viewers.viewers) == 2
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
            await proc.wait()
            follower.cancel()
            if reader is not None:
                reader.cancel()
            await healthy.pc.close()

    # The pipeline and the healthy viewer go on at the rate they had (generous bounds: 2 cores).
    assert during["source"] >= 0.8 * before["source"] > 0
    assert during["frames"] >= 0.7 * before["frames"] > 0
    assert during["messages"] >= 0.7 * before["messages"] > 0
    assert during["fine_dropped"] * STALL_S <= 3
    # The frozen viewer's channel filled to its limit, no further, and then it lost messages.
    message_bytes = max(len(messages.pack(m)) for m in healthy.messages)
    assert MAX_BUFFERED // 2 <= window.max_buffered <= MAX_BUFFERED + message_bytes
    assert during["frozen_dropped"] >= 0.5 * during["source"]
    assert during["frozen_dropped"] > 5 * during["frozen_sent"]
    # Its video was not held for it either: RTP over UDP has no backpressure, so the server sent
    # its packets at the source's rate (the kernel dropped what the frozen process did not read);
    # its queue never filled, so nothing accumulated in the server for it.
    assert during["frozen_packets"] >= 0.7 * during["source"]
