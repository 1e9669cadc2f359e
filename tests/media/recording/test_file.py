"""A recording on a disk that fills (before its first frame, in the middle, at its last
fragment) or whose folder is removed: no crash, the frame that broke it raises once, the file
keeps what is whole (or is gone), and the recorder says what was lost. Real full disks: a small
tmpfs (tests/support/disks.py, root only)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import av
import numpy as np
import pytest

from edgepipe.core.errors import OutputError
from edgepipe.deploy.doctor.magic import sniff
from edgepipe.deploy.doctor.report import Diagnosis
from edgepipe.deploy.doctor.structure import check
from edgepipe.media.frame import Frame, from_planes, nv12_views
from edgepipe.media.recording.file import RecordingFile, RecordingFileError
from edgepipe.media.recording.recorder import Recorder
from edgepipe.media.sources.synthetic import MATRIX, Scene
from tests.support.disks import small_tmpfs

FPS = 15


def frames(count: int, first: int = 0) -> Iterator[Frame]:
    """The synthetic scene (sensor noise: about 20 KB a second at 160x120), at 15 fps."""
    scene = Scene(160, 120)
    for seq in range(first, first + count):
        buf = np.empty(160 * 120 * 3 // 2, np.uint8)
        y, uv = nv12_views(buf, 160, 120)
        scene.draw(seq, y, uv)
        frame = from_planes(y, uv, matrix=MATRIX, seq=seq)
        frame.t_decoded_ns = seq * 1_000_000_000 // FPS
        yield frame


def fill(folder: Path, leave_bytes: int = 0) -> None:
    """Take every byte left on ``folder``'s disk but ``leave_bytes`` (whole pages)."""
    with open(folder / "filler", "ab", buffering=0) as filler:
        with contextlib.suppress(OSError):
            while filler.write(b"\0" * 4096):
                pass
        filler.truncate(filler.tell() - leave_bytes)


def recorded(recorder: Recorder, count: int, first: int = 0) -> list[OutputError]:
    """Feed ``count`` frames; the errors they raised."""
    raised = []
    for frame in frames(count, first):
        try:
            recorder.process(frame)
        except OutputError as exc:
            raised.append(exc)
    return raised


def decoded_s(path: Path) -> tuple[int, float]:
    """Frames and the last one's time; every packet decodes."""
    with av.open(str(path)) as container:
        times = [float(f.pts * f.time_base) for f in container.decode(video=0)]
    return len(times), times[-1]


def doctor_problems(path: Path) -> list[str]:
    data = path.read_bytes()
    diag = Diagnosis(str(path), sniff(data[:65536]).kind, None, len(data))
    check(io.BytesIO(data), len(data), diag)
    return [p.what for p in diag.problems]


def test_a_disk_full_before_the_first_frame_fails_the_output_and_leaves_no_file(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path, "256k", fill=True) as disk:
        out = disk / "rec.mp4"
        recorder = Recorder(out, fps=FPS)
        recorder.start()
        raised = recorded(recorder, 40)  # FFmpeg crashed here: the header was written again
        recorder.stop()
        assert len(raised) == 1  # the frame that broke it; the next ones are counted, not raised
        assert "recording stopped: no space left on device; nothing kept" in str(raised[0])
        assert recorder.failed_output == f"{out}: nothing recorded of 40 frame(s): no space left on device"
        assert not out.exists()


def test_a_disk_that_fills_mid_recording_keeps_its_whole_fragments(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path, "1m") as disk:
        out = disk / "rec.mp4"
        recorder = Recorder(out, fps=FPS)
        recorder.start()
        assert recorded(recorder, 40) == []  # 2.7 s: two fragments on disk, one open
        fill(disk, leave_bytes=8192)  # room for a part of the next fragment, not all of it
        [error] = recorded(recorder, 30, first=40)
        recorder.stop()
        assert "no space left on device; the file keeps its first 1.9 s (30 frames)" in str(error)
        assert recorder.failed_output is not None
        assert "recording cut short (no space left on device): the file keeps its first 1.9 s " \
               "(30 frames), of 70 frame(s)" in recorder.failed_output  # fmt: skip
        assert decoded_s(out) == (30, pytest.approx(29 / FPS, abs=0.002))
        # The part of the third fragment that fit was cut off again: nothing half-written.
        assert doctor_problems(out) == []


def test_a_disk_full_at_the_last_fragment_keeps_the_ones_before(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path, "1m") as disk:
        out = disk / "rec.mp4"
        recorder = Recorder(out, fps=FPS)
        recorder.start()
        assert recorded(recorder, 40) == []
        fill(disk)
        recorder.stop()  # the trailer: the open fragment and the index at the end
        assert recorder.failed_output is not None
        assert "recording cut short (no space left on device): the file keeps its first 1.9 s" \
               in recorder.failed_output  # fmt: skip
        assert decoded_s(out)[0] == 30
        assert doctor_problems(out) == []


def test_a_folder_removed_under_the_recorder_is_a_failed_output(tmp_path: Path) -> None:
    folder = tmp_path / "usb"
    folder.mkdir()
    out = folder / "rec.mp4"
    recorder = Recorder(out, fps=FPS)
    recorder.start()
    assert recorded(recorder, 20) == []
    shutil.rmtree(folder)  # the file is gone with it: writes to it would vanish unseen
    [error] = recorded(recorder, 20, first=20)
    recorder.stop()
    assert "the file was deleted while recording (its folder removed?)" in str(error)
    assert recorder.failed_output is not None
    assert recorder.failed_output.startswith(f"{out}: nothing recorded of 40 frame(s): ")
    assert "deleted while recording" in recorder.failed_output
    assert not folder.exists()  # and nothing made it again


def test_a_whole_recording_is_fragmented_with_a_keyframe_every_second(tmp_path: Path) -> None:
    out = tmp_path / "rec.mp4"
    recorder = Recorder(out, fps=FPS)
    recorder.start()
    recorded(recorder, 50)
    recorder.stop()
    assert recorder.failed_output is None
    data = out.read_bytes()
    assert data.count(b"moof") == 4  # frames 0, 15, 30, 45: one fragment per keyframe
    with av.open(str(out)) as container:
        keys = [float(p.pts * p.time_base) for p in container.demux(video=0) if p.is_keyframe]
    assert keys == pytest.approx([0, 1, 2, 3], abs=0.002)
    assert decoded_s(out) == (50, pytest.approx(49 / FPS, abs=0.002))


@pytest.mark.parametrize("suffix", [".mkv", ".ts"])
def test_other_containers_record_and_play(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"rec{suffix}"
    recorder = Recorder(out, fps=FPS)
    recorder.start()
    recorded(recorder, 20)
    recorder.stop()
    assert recorder.failed_output is None
    assert decoded_s(out)[0] == 20


def test_a_file_abandoned_under_a_write_never_writes_into_the_file_that_takes_its_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rec.mp4"
    file = RecordingFile(path, "mp4")
    file.open()
    fds = len(os.listdir("/proc/self/fd"))
    real_write = os.write
    in_write, release = threading.Event(), threading.Event()
    worker: threading.Thread | None = None

    def slow_write(fd: int, data: bytes) -> int:
        if threading.current_thread() is not worker:
            return real_write(fd, data)
        written = real_write(fd, bytes(data[:10]))  # a short write, then the rest on the next pass
        in_write.set()
        release.wait(5)
        return written

    errors: list[BaseException] = []

    def write() -> None:
        try:
            file.write(b"x" * 100)
        except OSError as exc:
            errors.append(exc)

    worker = threading.Thread(target=write)
    monkeypatch.setattr(os, "write", slow_write)
    try:
        worker.start()
        assert in_write.wait(5)
        file.abandon()  # from another thread: a stop that could not wait for the write
        other = tmp_path / "other"
        fd = os.open(other, os.O_WRONLY | os.O_CREAT)  # the lowest free number: the recording's, if closed
        release.set()
        worker.join(5)
        os.close(fd)
    finally:
        release.set()
        monkeypatch.setattr(os, "write", real_write)
    assert other.read_bytes() == b""
    assert [type(e) for e in errors] == [RecordingFileError]
    assert file.broken is not None
    assert not path.exists()  # it held no frame: nothing half-written is left
    assert len(os.listdir("/proc/self/fd")) == fds - 1  # and its descriptor was closed


def test_every_whole_fragment_is_synced_to_the_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "rec.mp4"
    synced: list[tuple[bool, int]] = []  # a folder?, the size synced
    for name in ("fdatasync", "fsync"):
        real = getattr(os, name)

        def spy(fd: int, real: Callable[[int], None] = real) -> None:
            st = os.fstat(fd)
            synced.append((stat.S_ISDIR(st.st_mode), st.st_size))
            real(fd)

        monkeypatch.setattr(os, name, spy)
    recorder = Recorder(out, fps=FPS)
    recorder.start()
    recorded(recorder, 50)
    recorder.stop()
    data = out.read_bytes()
    # The end of each fragment as it is written (the next one's moof box starts 4 bytes before
    # its name), and the file's end (the last fragment and the index, at stop).
    ends = [m.start() - 4 for m in re.finditer(b"moof", data)][1:]
    ends.append(len(data))
    assert [size for is_dir, size in synced if not is_dir] == ends
    assert [is_dir for is_dir, _ in synced].count(True) == 1  # its name, once (a new file's folder entry)
