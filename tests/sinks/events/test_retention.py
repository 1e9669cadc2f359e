from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from edgepipe.sinks.events.retention import clips, prune, remove_parts


def _clip(folder: Path, name: str, size: int, mtime: float) -> Path:
    path = folder / name
    path.write_bytes(b"x" * size)
    os.utime(path, (mtime, mtime))
    return path


def test_the_oldest_clips_go_first_until_the_rest_fit(tmp_path: Path) -> None:
    _clip(tmp_path, "cam-20250101T000003Z.mp4", 100, 3000)
    _clip(tmp_path, "cam-20250101T000001Z.mp4", 100, 1000)
    _clip(tmp_path, "cam-20250101T000002Z.mp4", 100, 2000)
    _clip(tmp_path, "cam-20250101T000002Z-2.mp4", 100, 2500)
    assert prune(tmp_path, max_bytes=250, max_age_s=None, now=4000) == [
        "cam-20250101T000001Z.mp4",
        "cam-20250101T000002Z.mp4",
    ]
    assert [name for _, name, _ in clips(tmp_path)] == [
        "cam-20250101T000002Z-2.mp4",
        "cam-20250101T000003Z.mp4",
    ]


def test_clips_older_than_max_age_go(tmp_path: Path) -> None:
    _clip(tmp_path, "cam-20250101T000001Z.mp4", 10, 1000)
    _clip(tmp_path, "cam-20250101T000002Z.mp4", 10, 3500)
    assert prune(tmp_path, max_bytes=None, max_age_s=1000, now=4000) == ["cam-20250101T000001Z.mp4"]


def test_only_the_recorder_s_clips_are_counted_or_deleted(tmp_path: Path) -> None:
    other = _clip(tmp_path, "holiday.mp4", 10_000, 0)
    notes = _clip(tmp_path, "cam-20250101T000001Z.mp4.txt", 10_000, 0)
    _clip(tmp_path, "cam-20250101T000001Z.mp4", 100, 1000)
    assert prune(tmp_path, max_bytes=500, max_age_s=None, now=2000) == []
    assert other.exists()
    assert notes.exists()


def test_half_written_clips_left_by_a_killed_run_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid names no process now
    part = _clip(tmp_path, f".cam-20250101T000001Z.{dead.pid}.mp4.part", 10, 0)
    kept = _clip(tmp_path, ".hidden.part", 10, 0)
    assert remove_parts(tmp_path) == [part.name]
    assert kept.exists()


def test_a_clip_another_running_process_writes_is_left_alone(tmp_path: Path) -> None:
    """Several processes on one events folder: one starting never deletes another's clip."""
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as other:
        try:
            theirs = _clip(tmp_path, f".camera-20250101T000001Z.{other.pid}.mp4.part", 10, 0)
            ours = _clip(tmp_path, f".camera-20250101T000001Z-2.{os.getpid()}.mp4.part", 10, 0)
            assert remove_parts(tmp_path) == []
            assert theirs.exists()
            assert ours.exists()
        finally:
            other.kill()
    other.wait()
    assert remove_parts(tmp_path) == [theirs.name]


def test_the_clip_just_saved_is_kept_even_when_it_alone_is_over_max_bytes(tmp_path: Path) -> None:
    """Its ``event`` names it: retention deletes every older clip first, never the new one."""
    _clip(tmp_path, "cam-20250101T000001Z.mp4", 100, 1000)
    _clip(tmp_path, "cam-20250101T000002Z.mp4", 500, 2000)
    assert prune(tmp_path, max_bytes=300, max_age_s=None, now=3000, keep="cam-20250101T000002Z.mp4") == [
        "cam-20250101T000001Z.mp4"
    ]
    assert [name for _, name, _ in clips(tmp_path)] == ["cam-20250101T000002Z.mp4"]
