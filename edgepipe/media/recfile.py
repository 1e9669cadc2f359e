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
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import av.error

log = logging.getLogger(__name__)

KEYFRAME_INTERVAL_MS = 1000
"""The longest time between two keyframes, hence between two fragments: what a kill can lose
of what reached the muxer."""

FRAGMENTED_MP4 = {"movflags": "frag_keyframe+empty_moov+delay_moov+default_base_moof"}
"""A fragment per keyframe; the index (``moov``) first, without samples, written with the first
fragment (``delay_moov``: by then the first timestamps are known, so the index's edit list puts
the first frame at 0, and an encoder that gives its parameter sets with its first packet has
given them); offsets from each ``moof`` (what Media Source Extensions want)."""

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
    """One recording's container and the file under it. Not thread-safe: one writer thread.

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
        fd = self._fd
        if fd is None:
            raise RecordingFileError(errno.EBADF, "the recording's file is closed", str(self.path))
        if self._regular and os.fstat(fd).st_nlink == 0:
            why = "the file was deleted while recording (its folder removed?)"
            raise RecordingFileError(errno.ENOENT, why, str(self.path))
        view = memoryview(data)
        while view:  # FFmpeg takes a short count as an error: write it all, or raise
            view = view[os.write(fd, view) :]
        self._pos += len(data)
        self._end = max(self._end, self._pos)
        return len(data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if self._fd is None:
            raise RecordingFileError(errno.EBADF, "the recording's file is closed", str(self.path))
        self._pos = os.lseek(self._fd, offset, whence)
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
            self.broken = f"[Errno {exc.errno}] {exc.strerror}"
            raise RecordingFileError(exc.errno, f"cannot open it: {exc.strerror}", str(self.path)) from exc
        self._fd = fd
        self._regular = stat.S_ISREG(os.fstat(fd).st_mode)
        try:
            self.container = av.open(self, "w", format=self.format_name, options=self.options)
        except (av.error.FFmpegError, ValueError) as exc:
            self.broken = str(exc)
            self._close_fd()
            self._remove()
            raise RecordingFileError(errno.EINVAL, f"cannot open a {self.format_name} container: {exc}",
                                     str(self.path)) from exc  # fmt: skip
        return self.container

    def mux(self, packets: list[Any]) -> None:
        """Write ``packets`` (the header first, the first time). Raises
        :class:`RecordingFileError` when a write fails (the file is broken then)."""
        if self.broken is not None:
            raise RecordingFileError(
                errno.EIO, f"the recording stopped earlier: {self.broken}", str(self.path)
            )
        if not packets:
            return
        try:
            if self.muxed == 0 and self._header_bytes == 0:
                self.container.start_encoding()  # apart, so that a failed header is known as one
                self._header_bytes = self._whole_bytes = self._end
            for packet in packets:
                before = self._end
                self.container.mux_one(packet)
                if self._end > before:  # a fragment went out: every packet before this one is on disk
                    self.kept = Kept(*self._pending)
                self.muxed += 1
                self._pending = (self.muxed, _ms(packet))
                self._whole_bytes = self._end
        except (av.error.FFmpegError, OSError) as exc:
            self._break(exc)

    def close(self) -> Kept:
        """Write the trailer (the last fragment and the index) and close the file; what the
        file holds. Raises :class:`RecordingFileError` when that fails (the file is cut back to
        its last whole fragment, or removed)."""
        if self.broken is not None or self._fd is None:
            return self.kept
        try:
            if self.muxed:
                self.container.close()
                self.kept = Kept(*self._pending)
            else:  # no packet: no header either, and no file
                self._end = 0
        except (av.error.FFmpegError, OSError) as exc:
            self._break(exc)
        finally:
            self.container = None
        self._close_fd()
        if not self.muxed:
            self._remove()
        return self.kept

    def abandon(self) -> None:
        """Close the file without writing anything more (an error elsewhere)."""
        self._close_fd()
        self.container = None

    def _break(self, exc: BaseException) -> None:
        why = getattr(exc, "strerror", None) or str(exc)
        if isinstance(exc, OSError) and exc.errno is not None and not isinstance(exc, RecordingFileError):
            why = f"[Errno {exc.errno}] {why}"
        self.broken = why
        if self._regular and self._fd is not None:
            with contextlib.suppress(OSError):
                if os.fstat(self._fd).st_nlink == 0:  # deleted: what it held is gone with it
                    self.kept = Kept(0, None)
                os.ftruncate(self._fd, self._whole_bytes if self.kept.frames else 0)
        self._close_fd()
        # The container is dropped, never closed: with the file closed PyAV writes no trailer,
        # and a container whose header failed is never touched again.
        self.container = None
        if not self.kept.frames:
            self._remove()
        raise RecordingFileError(
            exc.errno if isinstance(exc, OSError) else errno.EIO, why, str(self.path)
        ) from exc

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _remove(self) -> None:
        if self._regular:
            with contextlib.suppress(OSError):
                self.path.unlink()


def _ms(packet: Any) -> int | None:
    if packet.pts is None or packet.time_base is None:
        return None
    return round(float(packet.pts * packet.time_base) * 1000)
