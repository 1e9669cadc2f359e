"""VideoSource's life: its decode thread ending, reopening, and stopping within the budgets."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path

import pytest

from edgepipe import Pipeline
from edgepipe.media.sources.reconnect import Reconnector
from edgepipe.media.sources.video import VideoSource
from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime.engine import Runtime
from tests.media.sources.test_video import FrameLog, pipeline
from tests.support.cli_process import start


async def test_a_skip_source_whose_decode_thread_died_opens_again(
    clip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_deliver = Reconnector._deliver
    broke: list[int] = []

    def deliver_once_broken(self: Reconnector, av_frame: object) -> bool:
        if not broke and self._outlet.status.decoded == 10:
            broke.append(1)
            raise RuntimeError("a bug in the decode thread")
        return real_deliver(self, av_frame)

    monkeypatch.setattr(Reconnector, "_deliver", deliver_once_broken)
    sink = FrameLog()
    p = Pipeline()
    p.sink("out", sink, inputs=p.source("cam", VideoSource(str(clip)), on_error="skip"))  # type: ignore[arg-type]
    report = await asyncio.wait_for(
        run_async(p, RunConfig(governed=False)), 30
    )  # it used to wait for the dead thread forever
    cam = report.stats.node("cam")
    assert cam.errors == 1
    assert cam.gauges["source"] == "ended"
    assert len(sink.seen) == 10 + 60  # the 10 frames before, then the file from its start


_STUCK_PIPELINE = """
from edgepipe import Pipeline
from edgepipe.media import VideoSource


def pipeline(source: str) -> Pipeline:
    p = Pipeline("stuck")
    p.sink("out", lambda frame: None, inputs=p.source("cam", VideoSource(source, timeout_s=10)))
    return p
"""


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["http", "rtsp"])
def test_a_source_stuck_opening_does_not_hold_up_the_end_of_a_timed_run(tmp_path: Path, scheme: str) -> None:
    # A server that accepts and never answers: the open waits for its 10 s deadline, which
    # nothing can cut short; the run must end on time anyway (the opening thread is abandoned).
    pipeline_file = tmp_path / "stuck.py"
    pipeline_file.write_text(_STUCK_PIPELINE)
    duration_s, drain_s = 3.0, 0.5
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"{scheme}://127.0.0.1:{server.getsockname()[1]}/cam.mp4"
        proc = start("run", pipeline_file, "--source", url, "--duration", str(duration_s),
                     "--drain-timeout", str(drain_s), stdout=None, cwd=tmp_path)  # fmt: skip
        assert proc.stderr is not None
        try:
            started = None
            for line in proc.stderr:  # the run starts after the imports: timed from there
                if "running 'stuck'" in line:
                    started = time.monotonic()
                    break
            assert started is not None, "the run did not start"
            rest = proc.stderr.read()
            code = proc.wait(timeout=30)
            took_s = time.monotonic() - started
        finally:
            proc.kill()
            proc.wait()
            proc.stderr.close()
    assert code == 0, rest
    assert took_s <= duration_s + drain_s + 1.0, (took_s, rest)
    assert "stopped while opening" in rest


@pytest.mark.slow
async def test_stop_fits_the_runtimes_stop_budget_and_abandons_a_hung_decode_thread(
    clip: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def hung(self: Reconnector) -> None:  # a driver call that ignores the stop flag
        self._outlet.set_state("live")
        time.sleep(4)

    monkeypatch.setattr(Reconnector, "run", hung)
    source = VideoSource(str(clip), timeout_s=5.0)
    runtime = Runtime(pipeline(source, FrameLog()).validate(), stop_timeout_s=2.0)
    task = asyncio.ensure_future(runtime.run())
    await asyncio.sleep(0.5)
    with caplog.at_level(logging.WARNING):
        t0 = time.monotonic()
        runtime.request_stop()
        await asyncio.wait_for(task, 10)
        took_s = time.monotonic() - t0
    messages = [r.getMessage() for r in caplog.records]
    assert any("decode thread did not stop within 1.0 s; abandoned" in m for m in messages), messages
    assert not any("stop() did not return" in m for m in messages)  # within its budget
    assert took_s < 2.0 + 1.0
