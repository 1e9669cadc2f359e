"""The file a recording writes: a container laid out so that a kill loses at most its last
second, and a write that fails never touches the container again.

Layout, by extension (:data:`LAYOUTS`):

- ``.mp4``, ``.m4v``, ``.mov``: fragmented MP4 (:data:`FRAGMENTED_MP4`): an index without
  samples (``moov``) first, then one fragment (``moof`` + ``mdat``) per keyframe interval, each
  written whole when the next keyframe comes. A file cut anywhere plays up to its last whole
  fragment; FFmpeg and browsers (``<video>``, Media Source Extensions) play it from the start.
- ``.mkv``: Matroska, one cluster per keyframe interval (at most 1 s: ``cluster_time_limit``).
- ``.ts``: MPEG-TS, written packet by packet.
- any other extension FFmpeg writes: as FFmpeg writes it (an ``.avi`` cut short loses more).

The file is opened here, not by FFmpeg, and written unbuffered: every byte the muxer flushes
(after every packet) reaches the kernel at once, and the size of what was written whole is
known after each packet. A write that fails (a full disk, an I/O error, the file deleted or its
folder removed: checked at every write) *breaks* the file: the muxer is never called again
(FFmpeg crashes when a muxer whose header failed is called again, and a trailer written after a
failed fragment would sit behind a hole), the file is cut back to the end of its last whole
write (the last whole fragment), and a file that holds no frame is removed: nothing
half-written is left behind.

Each whole fragment is synced to the disk as it is written (``fdatasync`` when a keyframe's
packet makes the file grow: about once a second, on the writer's thread; the folder once, for
the new file's name), and the file's end at close: a power cut loses what a kill loses, not the
~30 s the kernel may hold unwritten.

One writer thread; :meth:`RecordingFile.abandon` may come from another (a stop that cannot wait
for a write under way: a stalled disk, a FIFO nobody reads). The descriptor is closed only
between two writes, never under one (its number, reused by another file, would take the rest).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import av
import av.error

from edgepipe.core.errors import os_reason

log = logging.getLogger(__name__)

KEYFRAME_INTERVAL_MS = 1000
"""The longest time between two keyframes, hence between two fragments: what a kill can lose
of what reached the muxer."""

FRAGMENTED_MP4 = {"movflags": "frag_keyframe+empty_moov+delay_moov+default_base_moof"}
"""A fragment per keyframe; the index (``moov``) first, without samples, written with the first
fragment (``delay_moov``: by then the first timestamps are known, so the index's edit list puts
the first frame at 0, and an encoder that gives its parameter sets with its first packet has
given them); offsets from each ``moof`` (what Media Source Extensions want)."""

_T = TypeVar("_T")

ABANDON_WAIT_S = 0.05
"""How long :meth:`RecordingFile.abandon` waits for a write under way before leaving the
descriptor to it (it closes it when that write returns)."""

LAYOUTS: dict[str, dict[str, str]] = {
    "mp4": FRAGMENTED_MP4,
    "mov": FRAGMENTED_MP4,
    "ipod": FRAGMENTED_MP4,
    "matroska": {"cluster_time_limit": str(KEYFRAME_INTERVAL_MS)},
    "mpegts": {},
}
"""FFmpeg's muxer name -> the options that make a cut file play up to the cut."""


class RecordingFileError(OSError):
    """A write to the recording failed; the file is broken (see the module's docstring)."""


@dataclass(frozen=True, slots=True)
class Kept:
    """What a recording's file holds, as far as whole writes go."""

    frames: int
    """Frames (packets) in the file's whole writes."""
    last_ms: int | None
    """The last of those frames' time, in ms (None: no frame)."""


class RecordingFile:
    """One recording's container and the file under it: one writer thread, and
    :meth:`abandon` from any thread.

    ``open()`` opens the file and the container; ``add_stream``/``mux`` through
    :attr:`container` and :meth:`mux`; :meth:`close` writes the trailer. Every failure raises
    :class:`RecordingFileError` once the file is broken; a broken file takes no more calls
    (:attr:`broken` says why)."""

    def __init__(self, path: Path, format_name: str) -> None:
        self.path = path
        self.format_name = format_name
        self.options = dict(LAYOUTS.get(format_name, {}))
        self.container: Any = None
        self.broken: str | None = None
        """Why the file broke (a write failed), None while it is whole."""
        self.muxed = 0
        """Packets handed to the muxer."""
        self.kept = Kept(0, None)
        """What the file's whole writes hold: it keeps this if the process dies now."""
        self._fd: int | None = None
        self._io = threading.Lock()
        """Held across each call on the descriptor: it is closed only between two."""
        self._close_pending = False
        """Abandoned under a write: the writer closes the descriptor when the write returns."""
        self._ident: tuple[int, int] | None = None
        """The file's device and inode: only this file is ever removed, never one made after it."""
        self._folder_synced = False
        self._regular = False
        self._pos = 0
        self._end = 0
        self._whole_bytes = 0
        """The file's size after the last whole write (what a failure cuts back to)."""
        self._header_bytes = 0
        self._pending: tuple[int, int | None] = (0, None)
        """Packets muxed so far and the last one's time: on disk once a later write grows the file."""

    # -- the file object the muxer writes through (PyAV's custom I/O) -------------------------

    @property
    def closed(self) -> bool:
        """PyAV reads this at ``close()``: a closed file gets no trailer."""
        return self._fd is None

    def write(self, data: bytes) -> int:
        if self._regular and self._on_fd(os.fstat).st_nlink == 0:
            why = "the file was deleted while recording (its folder removed?)"
            raise RecordingFileError(errno.ENOENT, why, str(self.path))
        view = memoryview(data)
        while view:  # FFmpeg takes a short count as an error: write it all, or raise
            view = view[self._on_fd(functools.partial(_write, data=view)) :]
        self._pos += len(data)
        self._end = max(self._end, self._pos)
        return len(data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._pos = self._on_fd(lambda fd: os.lseek(fd, offset, whence))
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return self._regular  # a FIFO or a device is written straight through

    def writable(self) -> bool:
        return True

    # -- the recording ---------------------------------------------------------------------------

    def open(self) -> Any:
        """Open (create or truncate) the file and a container on it; returns the container.
        Raises :class:`RecordingFileError` (the file is broken then; nothing is left behind)."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            self.broken = os_reason(exc)
            raise RecordingFileError(exc.errno, f"cannot open it: {os_reason(exc)}", str(self.path)) from exc
        self._fd = fd
        st = os.fstat(fd)
        self._regular = stat.S_ISREG(st.st_mode)
        self._ident = (st.st_dev, st.st_ino)
        try:
            self.container = av.open(self, "w", format=self.format_name, options=self.options)
        except (av.error.FFmpegError, ValueError) as exc:
            self.abandon(str(exc))
            raise RecordingFileError(errno.EINVAL, f"cannot open a {self.format_name} container: {exc}",
                                     str(self.path)) from exc  # fmt: skip
        return self.container

    def mux(self, packets: list[Any]) -> None:
        """Write ``packets`` (the header first, the first time); each fragment they complete is
        synced to the disk. Raises :class:`RecordingFileError` when a write fails (the file is
        broken then)."""
        container = self.container  # before the check: abandon() breaks it, then drops this
        if self.broken is not None or container is None:
            raise RecordingFileError(
                errno.EIO, f"the recording stopped earlier: {self.broken or 'closed'}", str(self.path)
            )
        if not packets:
            return
        try:
            if self.muxed == 0 and self._header_bytes == 0:
                container.start_encoding()  # apart, so that a failed header is known as one
                self._header_bytes = self._whole_bytes = self._end
            for packet in packets:
                before = self._end
                container.mux_one(packet)
                if self._end > before:  # a fragment went out: every packet before this one is on disk
                    if packet.is_keyframe:  # a fragment (a cluster; a second of TS) begins: about 1/s
                        self._sync()
                    self.kept = Kept(*self._pending)
                self.muxed += 1
                self._pending = (self.muxed, _ms(packet))
                self._whole_bytes = self._end
        except (av.error.FFmpegError, OSError) as exc:
            self._break(exc)

    def close(self) -> Kept:
        """Write the trailer (the last fragment and the index), sync it, and close the file; what
        the file holds. Raises :class:`RecordingFileError` when that fails (the file is cut
        back to its last whole fragment, or removed)."""
        container = self.container
        if self.broken is not None or self._fd is None or container is None:
            return self.kept
        try:
            if self.muxed:
                container.close()
                self._sync()
                self.kept = Kept(*self._pending)
            else:  # no packet: no header either, and no file
                self._end = self._whole_bytes = 0
        except (av.error.FFmpegError, OSError) as exc:
            self._break(exc)
        finally:
            self.container = None
        with self._io:
            self._cut_and_close()
        return self.kept

    def abandon(self, why: str | None = None) -> None:
        """Stop here (an error elsewhere, or a stop that cannot wait): the file is broken
        (``why``, unless it broke before), cut back to its last whole write and closed (removed
        when it keeps no frame), the container dropped. Safe from any thread: a write under way
        on the writer's thread is left to finish, and the file is closed when it returns (that
        write then fails)."""
        self.broken = self.broken or why or "abandoned"
        self._close_pending = True
        if self._io.acquire(timeout=ABANDON_WAIT_S):
            try:
                self._cut_and_close()
            finally:
                self._io.release()
        self.container = None  # the writer's thread keeps it while it is under a call

    def _on_fd(self, call: Callable[[int], _T]) -> _T:
        """``call(fd)``, the descriptor held open under it; raises once the file is closed or
        abandoned (closing it then, if abandoned under this call)."""
        with self._io:
            if self._close_pending:
                self._cut_and_close()
            fd = self._fd
            if fd is None:
                why = f"the recording stopped: {self.broken}" if self.broken else "the file is closed"
                raise RecordingFileError(errno.EBADF, why, str(self.path))
            result = call(fd)
            if self._close_pending:
                self._cut_and_close()
                raise RecordingFileError(errno.EBADF, f"the recording stopped: {self.broken}", str(self.path))
            return result

    def _sync(self) -> None:
        """What the file holds onto the disk (its data and size), the first time its name too."""
        if not self._regular:
            return
        self._on_fd(os.fdatasync)
        if not self._folder_synced:
            self._folder_synced = True
            sync_folder(self.path.parent)

    def _break(self, exc: BaseException) -> NoReturn:
        self.broken = self.broken or os_reason(exc)
        with self._io:
            self._cut_and_close()
        # The container is dropped, never closed: with the file closed PyAV writes no trailer,
        # and a container whose header failed is never touched again.
        self.container = None
        raise RecordingFileError(
            exc.errno if isinstance(exc, OSError) else errno.EIO, self.broken, str(self.path)
        ) from exc

    def _cut_and_close(self) -> None:
        """(``_io`` held) Cut the file back to its last whole write and close it; removed when
        it keeps no frame (deleted under the recording: it keeps none)."""
        fd, self._fd = self._fd, None
        self._close_pending = False
        if fd is None:
            return
        if self._regular and self.broken is not None:
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_nlink == 0:  # deleted: what it held is gone with it
                    self.kept = Kept(0, None)
                os.ftruncate(fd, self._whole_bytes if self.kept.frames else 0)
        with contextlib.suppress(OSError):
            os.close(fd)
        if not self.kept.frames and (self.broken is not None or not self.muxed):
            self._remove()

    def _remove(self) -> None:
        if not self._regular:
            return
        with contextlib.suppress(OSError):
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._ident:
                self.path.unlink()


def sync_folder(folder: Path) -> None:
    """Best effort: ``folder``'s entries onto the disk, so a file's new name survives a power
    cut (a file system that cannot sync a folder keeps names as well as it does anyway)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write(fd: int, data: memoryview) -> int:
    return os.write(fd, data)


def _ms(packet: Any) -> int | None:
    if packet.pts is None or packet.time_base is None:
        return None
    return round(float(packet.pts * packet.time_base) * 1000)
