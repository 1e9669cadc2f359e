"""Event clips on a disk that fills up, or a folder that goes away: every clip that starts ends
with one ``end`` or ``removed`` (with the error), a lost clip fails the run's output, and
nothing half-written (nor the space of a removed file) is left behind."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgepipe.media.frame import from_rgb
from edgepipe.sinks.events.recorder import EventRecorder
from edgepipe.wire.results import Message
from tests.support.disks import small_tmpfs

NO_SPACE = "cannot write: no space left on device"


async def _feed(
    recorder: EventRecorder, frames: range, cues: list[int], size: tuple[int, int], *, end: bool = True
) -> list[Any]:
    """Frames of noise at 15 fps of media time (~40 KB each at 320x240), a trigger after each
    frame in ``cues``; the messages' data, with the input's end when ``end``."""
    rng = np.random.default_rng(0)
    out: list[Message] = []
    for seq in frames:
        frame = from_rgb(rng.integers(0, 255, (*size, 3), np.uint8), seq=seq)
        frame.pts, frame.time_base, frame.t_decoded_ns = seq, Fraction(1, 15), time.monotonic_ns()
        out += await recorder._take(frame)
        if seq in cues:
            out += await recorder._take(Message("event", {"what": "cue", "source": frame.source_id}))
    if end:
        out += await recorder._run(recorder.engine.close, "ended")
    return [m.data for m in out]


def _fill(path: Path) -> None:
    """Take what is left of a disk, to the last 512 bytes (unbuffered: nothing left to flush)."""
    with open(path, "wb", buffering=0) as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"\0" * 512)


def _held(folder: Path) -> list[str]:
    """Files in ``folder`` this process still has open (a removed file's space stays taken)."""
    fds = Path("/proc/self/fd")
    links = (os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink())
    return [link for link in links if link.startswith(str(folder))]


def _paired(messages: list[dict[str, Any]]) -> list[str]:
    """The states in order, checking that each clip has one start and then one closing message."""
    states = [m["state"] for m in messages]
    assert states[0::2] == ["start"] * (len(states) // 2), states
    assert all(s in ("end", "removed") for s in states[1::2]), states
    assert [m["path"] for m in messages[0::2]] == [m["path"] for m in messages[1::2]]
    return states


async def test_clips_lost_to_a_full_disk_mid_clip_end_removed_and_fail_the_output(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with small_tmpfs(tmp_path, "1m") as disk:
        folder = disk / "events"
        recorder = EventRecorder(folder, pre_s=0.5, post_s=0.5)
        await recorder.start()
        # Two trigger storms, each more than the disk holds (1 MB: ~26 frames of noise).
        storms = range(10, 41, 2), range(60, 81, 2)
        with caplog.at_level(logging.INFO, logger="edgepipe.sinks"):
            messages = await _feed(recorder, range(100), [*storms[0], *storms[1]], (240, 320))
        await recorder.stop()
        assert _paired(messages) == ["start", "removed", "start", "removed"]  # old code: ["start"]
        first, second = messages[1], messages[3]
        assert (first["error"], first["ended_by"], first["triggers"]) == (
            NO_SPACE,
            "post_roll",
            len(storms[0]),
        )
        assert second["error"] == NO_SPACE
        assert messages[0]["error"] is None  # the disk filled after it started
        assert (
            recorder.failed_output
            == f"event clip {first['path']} lost: {NO_SPACE}; 1 more lost (see the log)"
        )
        assert list(folder.iterdir()) == []  # no half file, no hidden part
        assert _held(disk) == []
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, errors  # one line per outage, not per clip
        assert f"{first['path']}: {NO_SPACE}; the clip is lost" in errors[0]


async def test_a_disk_full_before_the_first_write_loses_the_clip_and_holds_nothing(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path, "1m", fill=True) as disk:
        folder = disk / "events"
        folder.mkdir()
        recorder = EventRecorder(folder, pre_s=0.5, post_s=0.5)
        await recorder.start()
        messages = await _feed(recorder, range(30), [10, 11, 12], (240, 320))
        await recorder.stop()
        assert _paired(messages) == ["start", "removed"]  # old code: a lone "removed"
        assert messages[0]["error"] == messages[1]["error"] == NO_SPACE
        assert recorder.failed_output == f"event clip {messages[1]['path']} lost: {NO_SPACE}"
        assert list(folder.iterdir()) == []
        assert _held(disk) == []  # old code: FFmpeg kept the removed file open (its header failed)


async def test_a_disk_that_fills_before_the_clip_is_finished_loses_it_at_close(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path, "8m") as disk:  # room for the frames (~4 KB each), not the index
        folder = disk / "events"
        recorder = EventRecorder(folder, pre_s=0.5, post_s=100.0)
        await recorder.start()
        # 900 small frames: an index (moov) of more than 4 KB, the most a file's last page has free
        messages = await _feed(recorder, range(900), [10], (48, 64), end=False)
        _fill(disk / "filler")
        messages += await _feed(recorder, range(0), [], (48, 64))  # the input ends: finish it
        await recorder.stop()
        assert _paired(messages) == ["start", "removed"]
        error = "cannot finish the file: no space left on device"
        assert (messages[1]["error"], messages[1]["frames"]) == (error, 900)
        assert recorder.failed_output == f"event clip {messages[1]['path']} lost: {error}"
        assert list(folder.iterdir()) == []
        assert _held(disk) == []


async def test_a_folder_removed_mid_clip_loses_that_clip_and_the_next(tmp_path: Path) -> None:
    folder = tmp_path / "events"
    recorder = EventRecorder(folder, pre_s=0.5, post_s=1.5)  # the first clip: frames 0 to 32
    await recorder.start()
    messages = await _feed(recorder, range(20), [10], (48, 64), end=False)
    shutil.rmtree(folder)  # while the clip is being written
    messages += await _feed(recorder, range(20, 60), [45], (48, 64))
    await recorder.stop()
    states = _paired(messages)
    assert states == ["start", "removed", "start", "removed"], messages
    assert messages[1]["error"] == "cannot name the file: no such file or directory"
    assert messages[2]["error"] == "cannot open the file: no such file or directory"
    assert recorder.failed_output is not None
    assert recorder.failed_output.startswith(f"event clip {messages[1]['path']} lost: cannot name the file")
    assert not folder.exists()  # never made again: it may have been a drive's mount point
