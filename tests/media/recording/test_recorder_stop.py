"""A Recorder's ``stop()`` while a frame's call outlived the drain (the runtime abandons it to its
thread): the call waits for the CPU budget, or its write is blocked (a stalled disk, a FIFO nobody
reads). ``stop()`` never flushes or closes the container under it, and returns in bounded time."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgepipe.media.recording import recorder as recording
from edgepipe.media.recording.recorder import Recorder
from edgepipe.runtime.deadlines import HOOK_GRACE_S
from edgepipe.sched.gate import Gate, Ticket, gate, set_gate
from tests.media.recording.test_file import FPS, decoded_s, frames, recorded


def _call(fn: Callable[[], None], errors: list[BaseException]) -> None:
    try:
        fn()
    except BaseException as exc:  # the test asserts what it was
        errors.append(exc)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def budget() -> Iterator[Gate]:
    """A CPU budget of one unit, as the process's gate."""
    before = gate()
    try:
        yield set_gate(Gate(units=1))
    finally:
        set_gate(before)


def test_a_frame_waiting_for_the_cpu_budget_at_stop_leaves_at_once_and_is_not_encoded(
    tmp_path: Path, budget: Gate
) -> None:
    out = tmp_path / "rec.mp4"
    recorder = Recorder(out, fps=FPS)
    recorder.start()
    assert recorded(recorder, 20) == []
    detector = Ticket("detector", "detect", 1)
    t_held = budget.enter(detector)  # the whole budget: the next encode waits (up to 10 s)
    errors: list[BaseException] = []
    [late] = frames(1, first=20)
    worker = threading.Thread(target=_call, args=(lambda: recorder.process(late), errors))
    try:
        worker.start()
        while budget.stats().waits == 0:
            time.sleep(0.001)
        recorder.stop()
        worker.join(timeout=1.0)
        still_waiting = worker.is_alive()
    finally:
        budget.leave(detector, t_held)
        worker.join()
    assert not still_waiting  # the stop ended its wait: it did not encode into a closed file later
    assert errors == []
    assert recorder.failed_output is None  # a frame dropped by the stop is not a failed output
    assert (recorder.frames, recorder.dropped) == (20, 1)
    assert decoded_s(out)[0] == 20


def test_a_write_blocked_at_stop_is_left_alone_and_the_file_kept_at_its_whole_fragments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edgepipe.media.recording.recorder")
    out = tmp_path / "rec.mp4"
    recorder = Recorder(out, fps=FPS)
    fds = _open_fds()
    recorder.start()
    assert recorded(recorder, 20) == []  # the first fragment (15 frames) is on disk
    real_write = os.write
    in_write, release = threading.Event(), threading.Event()
    elsewhere: list[str] = []  # writes to the file from another thread while one is under way
    worker: threading.Thread | None = None

    def stalled_write(fd: int, data: bytes) -> int:
        if threading.current_thread() is worker:
            in_write.set()
            release.wait(5)  # a disk that stalls, a FIFO nobody reads
        elif in_write.is_set() and not release.is_set():
            elsewhere.append(threading.current_thread().name)
        return real_write(fd, data)

    errors: list[BaseException] = []
    # Frame 30 is a keyframe: muxing it writes the fragment of frames 15-29.
    worker = threading.Thread(target=_call, args=(lambda: recorded_or_raise(recorder, 11, 20), errors))
    monkeypatch.setattr(os, "write", stalled_write)
    try:
        worker.start()
        assert in_write.wait(5)
        t0 = time.monotonic()
        recorder.stop()
        stop_s = time.monotonic() - t0
    finally:
        release.set()
        worker.join(5)
        monkeypatch.setattr(os, "write", real_write)
    assert elsewhere == []  # stop() never touched the container under the write
    assert recording.STOP_WAIT_S < HOOK_GRACE_S  # a stop() hook is sure to get this long
    assert recording.STOP_WAIT_S <= stop_s < recording.STOP_WAIT_S + 0.3
    assert recorder.failed_output is not None
    assert "cut short (a frame's encode or write was still under way at stop" in recorder.failed_output
    # 31 came: 30 recorded, one still being written.
    assert "the file keeps its first 0.9 s (15 frames), of 31 frame(s)" in recorder.failed_output
    [line] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.getMessage() == recorder.failed_output
    assert len(errors) == 1  # the stalled frame's write failed once the file was abandoned
    assert decoded_s(out) == (15, pytest.approx(14 / FPS, abs=0.002))  # cut back: nothing half-written
    assert _open_fds() == fds
    assert b"mfra" not in out.read_bytes()  # no trailer (its index of fragments) written after it


def recorded_or_raise(recorder: Recorder, count: int, first: int) -> None:
    for frame in frames(count, first):
        recorder.process(frame)
