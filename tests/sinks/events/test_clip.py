from __future__ import annotations

import os
import time
from pathlib import Path

import av
import numpy as np
import pytest

from edgepipe.media.frame import from_rgb
from edgepipe.sinks.events.clip import ClipWriter, clip_name, part_name
from edgepipe.sinks.events.encode import ClipEncoder


def test_a_clip_is_written_under_a_hidden_name_and_named_when_finished(tmp_path: Path) -> None:
    encoder = ClipEncoder(encoder="libx264")
    packets = []
    for i in range(10):
        frame = from_rgb(np.full((48, 64, 3), 20 * i, np.uint8), seq=i)
        frame.t_decoded_ns = i * 100_000_000
        packets += encoder.encode(frame)
    writer = ClipWriter(tmp_path, "cam-20250101T000000Z.mp4", 64, 48, base_pts=packets[0].pts)
    for packet in packets:
        writer.write(packet, packet.pts)
    assert not writer.path.exists()
    assert writer.finish() == writer.path
    assert [p.name for p in tmp_path.iterdir()] == [writer.path.name]
    with av.open(str(writer.path)) as container:
        frames = list(container.decode(video=0))
    assert len(frames) == 10
    assert frames[0].key_frame
    assert frames[-1].time == 0.9


def test_a_clip_without_frames_leaves_nothing(tmp_path: Path) -> None:
    writer = ClipWriter(tmp_path, "cam-20250101T000000Z.mp4", 64, 48, base_pts=0)
    assert writer.finish() is None
    assert list(tmp_path.iterdir()) == []


def test_clip_names_are_safe_and_never_taken_twice(tmp_path: Path) -> None:
    t = time.mktime((2025, 1, 2, 3, 4, 5, 0, 0, 0)) - time.timezone
    name = clip_name(tmp_path, "rtsp://cam/1", t)
    assert name == "rtsp_cam_1-20250102T030405Z.mp4"
    (tmp_path / name).write_bytes(b"")
    assert clip_name(tmp_path, "rtsp://cam/1", t) == "rtsp_cam_1-20250102T030405Z-2.mp4"


def test_two_writers_given_one_name_keep_both_clips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes on one folder, one source id, one second: a name that either could take
    races; the second to finish takes the next free name, never replaces the first's clip."""
    encoder = ClipEncoder(encoder="libx264")
    packets = []
    for i in range(4):
        frame = from_rgb(np.full((48, 64, 3), 40 * i, np.uint8), seq=i)
        frame.t_decoded_ns = i * 100_000_000
        packets += encoder.encode(frame)
    name = "camera-20250101T000000Z.mp4"
    first = ClipWriter(tmp_path, name, 64, 48, base_pts=packets[0].pts)
    with monkeypatch.context() as other_process:
        other_process.setattr(os, "getpid", lambda: 1)
        second = ClipWriter(tmp_path, name, 64, 48, base_pts=packets[0].pts)
    assert second.part != first.part
    for writer, packet in [(first, packets[0]), (second, packets[0]), (second, packets[1])]:
        writer.write(packet, packet.pts)
    assert second.finish() == tmp_path / name
    assert first.finish() == tmp_path / "camera-20250101T000000Z-2.mp4"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "camera-20250101T000000Z-2.mp4"])
    assert (tmp_path / name).stat().st_size > (tmp_path / "camera-20250101T000000Z-2.mp4").stat().st_size


def test_a_name_being_written_by_any_process_is_taken(tmp_path: Path) -> None:
    t = time.mktime((2025, 1, 2, 3, 4, 5, 0, 0, 0)) - time.timezone
    (tmp_path / part_name("cam-20250102T030405Z.mp4", pid=1)).write_bytes(b"")
    assert clip_name(tmp_path, "cam", t) == "cam-20250102T030405Z-2.mp4"


def test_a_clip_is_synced_to_the_disk_before_it_takes_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a power cut, a clip under its final name holds what was written (not zeros, not nothing).
    encoder = ClipEncoder(encoder="libx264")
    frame = from_rgb(np.full((48, 64, 3), 90, np.uint8), seq=0)
    packets = encoder.encode(frame) + encoder.flush()
    writer = ClipWriter(tmp_path, "cam-20250101T000000Z.mp4", 64, 48, base_pts=packets[0].pts)
    for packet in packets:
        writer.write(packet, packet.pts)
    synced: list[tuple[int, int, bool]] = []  # inode, size, named yet?
    real = os.fdatasync

    def spy(fd: int) -> None:
        real(fd)
        st = os.fstat(fd)
        synced.append((st.st_ino, st.st_size, writer.path.exists()))

    monkeypatch.setattr(os, "fdatasync", spy)
    path = writer.finish()
    assert path is not None
    assert synced == [(path.stat().st_ino, path.stat().st_size, False)]
