"""A video source against a real RTSP server (GStreamer's, on 127.0.0.1) that goes away and comes
back: live again soon after it returns, whatever the backoff had reached, with its states said.
The reconnect loop's own cases, with fake decoders, are in test_reconnect.py."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from edgepipe import Pipeline
from edgepipe.media.chooser import DecoderChooser, Opened
from edgepipe.media.sources.video import VideoSource
from edgepipe.runtime.engine import Runtime
from edgepipe.testing import ListSink
from tests.media.conftest import RtspServer
from tests.media.sources.test_video import FrameLog, _until, pipeline


@pytest.mark.slow
async def test_a_source_is_live_again_soon_after_its_server_returns_however_long_it_was_away(
    rtsp_server: RtspServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens: list[float] = []  # when each full open started (the real one runs)
    real_open = DecoderChooser.open

    def counted_open(self: DecoderChooser) -> Opened:
        opens.append(time.monotonic())
        return real_open(self)

    monkeypatch.setattr(DecoderChooser, "open", counted_open)
    # The backoff doubles from 0.25 s to a 2 s cap here (4 s by default): the same shape, half the wait.
    source = VideoSource(rtsp_server.url, timeout_s=2.0, backoff_max_s=2.0)
    sink = FrameLog()
    runtime = Runtime(pipeline(source, sink, policy="latest", queue_size=1).validate())
    run_task = asyncio.ensure_future(runtime.run())
    try:
        await _until(lambda: source.state == "live" and len(sink.seen) >= 10, 15, "first frames")
        rtsp_server.kill()
        t_down = time.monotonic()
        await _until(lambda: source.state in ("stalled", "reconnecting"), 5, "the outage noticed")
        await asyncio.sleep(4.5)  # long enough for the backoff to reach its 2 s cap
        # The worst moment to come back: just after a full open failed, with 2 s to the next.
        tried = len(opens)
        await _until(lambda: len(opens) > tried, 4, "another open")
        await asyncio.sleep(0.3)
        rtsp_server.start()  # returns once the server accepts connections
        t_back = time.monotonic()
        opens_while_down = sum(1 for t in opens if t_down < t < t_back)
        frames_before = len(sink.seen)
        await _until(lambda: source.state == "live", 10, "live again")
        back_after_s = time.monotonic() - t_back
        await _until(lambda: len(sink.seen) > frames_before + 5, 5, "frames again")
    finally:
        runtime.request_stop()
        await asyncio.wait_for(run_task, 15)
    # The target is 2 s; 1 s more of slack for a loaded 2-core CI machine.
    assert back_after_s <= 3.0, back_after_s
    # Backing off while it was down: 0.25 + 0.5 + 1 + 2 + 2 s ... 4 to 6 full opens in 4.5 to 8.5 s.
    assert 3 <= opens_while_down <= 7, opens_while_down


@pytest.mark.slow
async def test_rtsp_source_reconnects_after_the_server_comes_back(
    rtsp_server: RtspServer, tmp_path: Path
) -> None:
    frames = FrameLog()
    ticks: ListSink[int] = ListSink()
    p = Pipeline()
    cam = p.source("cam", VideoSource(rtsp_server.url, timeout_s=1.0, backoff_max_s=1.0))
    p.sink("frames", frames, inputs=cam, policy="latest", queue_size=1)
    # An unrelated branch: it must keep flowing while the camera is down.
    p.sink("ticks", ticks, inputs=p.source("clock", lambda: _ticker(0.01)))
    results = tmp_path / "r.jsonl"
    from edgepipe.wire.results import ResultsWriter

    runtime = Runtime(p.validate(), results=ResultsWriter(str(results)))
    run = asyncio.ensure_future(runtime.run())
    try:
        await _until(lambda: len(frames.seen) >= 20, 15, "first frames over RTSP")
        rtsp_server.kill()
        await _until(lambda: _state(runtime) in ("stalled", "reconnecting"), 5, "stall reported")
        ticks_at_outage = len(ticks.items)
        await asyncio.sleep(1.5)
        assert len(ticks.items) > ticks_at_outage + 50  # the rest of the pipeline never blocked
        frames_before = len(frames.seen)
        rtsp_server.start()
        t_back = time.monotonic()
        await _until(lambda: len(frames.seen) > frames_before + 10, 8, "frames after the server came back")
        assert time.monotonic() - t_back < 5
    finally:
        runtime.request_stop()
        await asyncio.wait_for(run, 15)
    states = [json.loads(line)["data"]["state"] for line in results.read_text().splitlines()
              if '"source_state"' in line]  # fmt: skip
    assert states[:2] == ["connecting", "live"]
    assert "stalled" in states
    assert states[-1] == "live"
    assert runtime.snapshot().node("cam").gauges["reconnects"] >= 1


async def _ticker(interval_s: float):  # type: ignore[no-untyped-def]
    n = 0
    while True:
        yield n
        n += 1
        await asyncio.sleep(interval_s)


def _state(runtime: Runtime) -> object:
    return runtime.snapshot().node("cam").gauges.get("source")
