"""One event clip on disk: packets remuxed into an MP4, never re-encoded.

A :class:`ClipWriter` writes to a hidden temporary name in the events folder
(``.NAME.PID.mp4.part``: the writer's process id, so that a process starting on a shared folder
removes only what a dead one left) and renames it to ``NAME.mp4`` once the file is complete (its
index, the ``moov``, written at close): a clip under its final name is always playable. The
rename never replaces a clip: when another process took the name meanwhile (two recorders on one
folder, one second, one source id), the clip takes the next free one (``-2``, ``-3`` …). A clip
that got no packet, or whose file could not be completed, is removed instead.

Packets keep the encoder's 90 kHz timestamps, moved so that the clip's first packet (a
keyframe) is at 0. Blocking (file writes): runs on the recorder's worker thread.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import av
import av.error

from edgepipe.core.errors import os_reason as reason
from edgepipe.media.recording.file import sync_folder
from edgepipe.sinks.events.encode import TIME_BASE

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def clip_name(folder: Path, source_id: str, wall_s: float) -> str:
    """A free name for a clip of ``source_id`` starting at ``wall_s``:
    ``SOURCE-YYYYmmddTHHMMSSZ.mp4`` (UTC), with ``-2``, ``-3`` … when taken."""
    source = _UNSAFE.sub("_", source_id).strip("._") or "source"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(wall_s))
    name = f"{source}-{stamp}.mp4"
    n = 1
    while _taken(folder, name):
        n += 1
        name = f"{source}-{stamp}-{n}.mp4"
    return name


def part_name(name: str, pid: int | None = None) -> str:
    """The hidden name clip ``name`` is written under by process ``pid`` (default: this one)."""
    return f".{name.removesuffix('.mp4')}.{os.getpid() if pid is None else pid}.mp4.part"


def _taken(folder: Path, name: str) -> bool:
    # A clip of that name, or one being written under it by any process.
    return (folder / name).exists() or any(
        folder.glob(f".{glob.escape(name.removesuffix('.mp4'))}.*.mp4.part")
    )


def _place(part: Path, path: Path) -> Path:
    """Rename ``part`` to ``path`` without replacing a file there (a hard link fails if the name
    is taken): the next free name when taken. Raises ``OSError``."""
    while True:
        try:
            os.link(part, path)
        except FileExistsError:
            stem = re.sub(r"-\d+$", "", path.name.removesuffix(".mp4"))
            n = 2
            while (path.parent / f"{stem}-{n}.mp4").exists():
                n += 1
            log.warning("event recordings: %s was taken meanwhile (another process?); saved as %s-%d.mp4",
                        path, stem, n)  # fmt: skip
            path = path.parent / f"{stem}-{n}.mp4"
            continue
        except OSError:  # a file system without hard links (FAT): a plain rename
            if path.exists():
                raise
            os.replace(part, path)
            return path
        os.unlink(part)
        return path


class ClipWriter:
    """Writes one clip's packets; :meth:`finish` completes and names it (or removes it).

    Raises ``av.error.FFmpegError`` or ``OSError`` when the file cannot be opened or written;
    then :meth:`abandon` removes it. The file is opened here, not by FFmpeg: a muxer whose header
    could not be written never closes a file it opened itself (a descriptor, and on a full disk
    the space of the removed file, held until the process exits), and Python's file writes all
    of each buffer or raises (FFmpeg takes a short write as done, and the clip would be cut)."""

    def __init__(self, folder: Path, name: str, width: int, height: int, base_pts: int) -> None:
        self.path = folder / name
        """Where the clip lands once finished."""
        self.part = folder / part_name(name)
        self.base_pts = base_pts
        """The encoder's pts of the clip's first packet (its 0)."""
        self.frames = 0
        self.bytes = 0
        self.last_pts = base_pts
        self.error: str | None = None
        """Why :meth:`finish` could not complete the file (``None`` when it did, or held no frame)."""
        self._file: Any = open(self.part, "xb")  # noqa: SIM115 (closed by finish() or abandon())
        try:
            self._container: Any = av.open(self._file, "w", format="mp4")
            self._stream: Any = self._container.add_mux_stream("h264", width=width, height=height)
            self._stream.time_base = TIME_BASE
        except BaseException:
            self._container = None
            self.abandon()
            raise

    def write(self, packet: Any, pts: int) -> None:
        """Mux ``packet`` (its pts ``pts`` in the encoder's time base). The packet object is
        reused: its timestamps are set here, its data is not changed (the ring keeps it).
        Raises ``ValueError`` once the clip is finished or abandoned."""
        if self._container is None:
            raise ValueError(f"{self.path}: the clip is closed")
        rel = pts - self.base_pts
        packet.pts = packet.dts = rel
        # The last frame's duration is not known yet: the one before it stands for it (without
        # one, the file's edit list would end on the last frame's start and players drop it).
        packet.duration = max(0, pts - self.last_pts)
        packet.time_base = TIME_BASE
        packet.stream = self._stream
        self._container.mux(packet)
        self.frames += 1
        self.bytes += packet.size
        self.last_pts = pts

    def finish(self) -> Path | None:
        """Close the file and give it its name: the clip's path, or None when it holds no
        frame or could not be completed (then nothing is left behind, and :attr:`error` says
        why when frames were lost)."""
        container, self._container = self._container, None
        if container is None:
            return None
        ok = self.frames > 0
        try:
            container.close()  # the index (moov): a full disk fails here too
            self._file.flush()  # what Python still buffers
            # On the disk before it takes its name: after a power cut, a clip under its name
            # holds what was written (not zeros, not nothing). Its name is synced below.
            if ok:
                os.fdatasync(self._file.fileno())
            self._file.close()
        except (av.error.FFmpegError, OSError) as exc:
            self.error = f"cannot finish the file: {reason(exc)}"
            ok = False
        if ok:
            try:
                self.path = _place(self.part, self.path)
                sync_folder(self.path.parent)
                return self.path
            except OSError as exc:
                self.error = f"cannot name the file: {reason(exc)}"
        self._remove()
        return None

    def abandon(self) -> None:
        """Drop the clip: close and remove its file."""
        container, self._container = self._container, None
        if container is not None:
            with contextlib.suppress(av.error.FFmpegError, OSError):
                container.close()
        self._remove()

    def _remove(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()  # a write it still buffers fails again on a full disk: dropped
        with contextlib.suppress(OSError):
            self.part.unlink()

    @property
    def duration_s(self) -> float:
        return float((self.last_pts - self.base_pts) * TIME_BASE)
