"""Ctrl-C stops a run started from Python cleanly, whatever ``handle_signals`` says: the
recording is finished and the report comes back, no ``KeyboardInterrupt`` cancels the nodes
mid-call. A program's own SIGINT handler is left alone."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import av
import pytest

from edgepipe.runtime.drive import interrupt_unclaimed

SCRIPT = """
import asyncio
import sys

import edgepipe
from edgepipe import Pipeline, Recorder, RunConfig, VideoSource


async def ready(runtime):
    await runtime.all_started.wait()
    print("started", flush=True)


p = Pipeline("record")
p.sink("record", Recorder(sys.argv[1]), inputs=p.source("camera", VideoSource("synthetic://320x240@15")))
config = RunConfig(watchers=[ready])
if sys.argv[2] == "run":
    report = edgepipe.run(p, config)
else:
    report = asyncio.run(edgepipe.run_async(p, config))
print("ended", report.stopped_by, flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["run", "run_async"])
def test_ctrl_c_stops_a_library_run_cleanly_with_its_recording_finished(tmp_path: Path, how: str) -> None:
    script = tmp_path / "record.py"
    script.write_text(textwrap.dedent(SCRIPT))
    video = tmp_path / "out.mp4"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(video), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "ended stop", out + err
    assert "Traceback" not in err, err
    assert "terminate called" not in err, err
    assert "SIGINT: stopping" in err
    with av.open(str(video)) as played:  # finished: it plays to its end
        frames = sum(1 for _ in played.decode(video=0))
    assert frames >= 15, frames  # the second and a half before the stop, at 15 fps


def test_a_programs_own_sigint_handler_is_left_alone() -> None:
    assert interrupt_unclaimed()  # Python's default: a KeyboardInterrupt nobody asked for
    before = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        assert not interrupt_unclaimed()
    finally:
        signal.signal(signal.SIGINT, before)
