"""Encoding NV12/I420 frames to H.264 and recording them to MP4 (or MKV, TS).

:class:`Recorder` is a sink: ``p.sink("record", Recorder("out.mp4", fps=15), inputs=frames)``.
It picks a hardware H.264 encoder when one works here (NVENC, QSV, VAAPI, V4L2 M2M, VideoToolbox,
MediaCodec) and libx264 otherwise (:mod:`edgepipe.media.recording.encoders`), with one log line saying
which. Encoding is blocking work: it runs on the sink's worker thread, never on the event loop.
The stream is tagged with the colour of the frames it gets (matrix, range, primaries, transfer;
:mod:`edgepipe.media.recording.avframes`), so players read the pixels as meant.

The path is checked before anything is encoded: a container format its extension names
(``ValueError`` at construction), an existing folder and a file that opens for writing
(``OutputError`` at ``start()``; no folder is created). The file's layout (a kill loses at most
the last second) and what a failed write leaves are :mod:`edgepipe.media.recording.file`'s; a recording
that lost frames to one sets :attr:`Recorder.failed_output`: the run's report names it and
``edgepipe run`` exits 1.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn

import av
import av.error
from av.video.frame import PictureType

from edgepipe.core import threadname
from edgepipe.core.checks import check_writable_file
from edgepipe.core.context import current_node
from edgepipe.core.errors import OutputError
from edgepipe.media.frame import Frame
from edgepipe.media.recording.avframes import Colour, fill_av_frame, to_av_nv12
from edgepipe.media.recording.clock import RecordingClock
from edgepipe.media.recording.encoders import ENCODER_OPTIONS, check_encoder, pick_encoder
from edgepipe.media.recording.file import KEYFRAME_INTERVAL_MS, Kept, RecordingFile, RecordingFileError
from edgepipe.runtime.deadlines import HOOK_GRACE_S
from edgepipe.sched.gate import AdmissionCancelled, AdmissionTimeout, Ticket, gate
from edgepipe.sched.ledger import ticket_tag

log = logging.getLogger(__name__)

__all__ = ["ENCODER_OPTIONS", "Colour", "Recorder", "fill_av_frame", "pick_encoder", "to_av_nv12"]
"""Also the names this module had before :mod:`~edgepipe.media.recording.avframes` and
:mod:`~edgepipe.media.recording.encoders` took them (imported from here)."""

ENCODE_WAIT_S = 10.0
"""The longest an encode waits for the CPU budget (then the frame's write fails, counted)."""

STOP_WAIT_S = HOOK_GRACE_S - 0.1
"""How long :meth:`Recorder.stop` waits for a frame's call still under way (one that outlived the
drain: an encode, a write to a stalled disk or to a FIFO nobody reads) before it leaves the
container to that call and abandons the file: within the least a stop() hook is given
(``HOOK_GRACE_S``), so the stop always says what it did. A frame waiting for the CPU budget
leaves that wait at once (its ticket is cancelled)."""


class Recorder:
    """Writes every frame it receives to ``path`` as H.264 (a sink; blocking, so it runs on a
    worker thread). Timestamps follow the frames' media time, else their decode time
    (:mod:`edgepipe.media.recording.clock`); a keyframe comes at least every second, and an ``.mp4`` is
    fragmented MP4 (a fragment per keyframe, synced to the disk; ``.mkv`` and ``.ts`` as they
    stream, :mod:`edgepipe.media.recording.file`): a killed process, or a power cut, leaves a file that
    plays up to its last second or so. Encodes are heavy calls: each enters the CPU budget
    (:mod:`edgepipe.sched.gate`) at high priority.

    A write that fails (a full disk, the file or its folder removed) stops the recording: the
    file keeps what it holds whole (nothing half-written; no file when it holds no frame), that
    frame's call raises ``OutputError`` (logged, counted as the node's error), the frames after
    it are counted and dropped, and :attr:`failed_output` says what was lost (the run exits 1).
    A recording that cannot start (its encoder does not open) fails the same way, once.

    ``process()`` and ``stop()`` take turns (a lock): a frame's call that outlived the drain is
    never flushed or closed under; ``stop()`` waits :data:`STOP_WAIT_S` for it, then abandons
    the file at its last whole write and leaves the container to that call."""

    priority = "high"
    """Recording is the last thing the governor slows."""

    def __init__(self, path: str | Path, *, fps: float = 15.0, encoder: str = "auto", crf: int = 23) -> None:
        """Raises ``ValueError`` for an empty path, one whose extension names no container
        FFmpeg writes, an ``fps`` that is not a finite number above 0, a ``crf`` outside 0-51,
        an ``encoder`` that is neither ``auto`` nor a video encoder FFmpeg has here."""
        if not str(path).strip():
            raise ValueError("Recorder needs a file path (got an empty one)")
        if not (isinstance(fps, int | float) and math.isfinite(fps) and fps > 0):
            raise ValueError(f"Recorder fps must be a finite number above 0, got {fps!r}")
        if not (isinstance(crf, int) and 0 <= crf <= 51):
            raise ValueError(f"Recorder crf must be an integer in [0, 51] (23: the default), got {crf!r}")
        check_encoder(encoder)
        try:  # opens nothing: an output container touches its file at the first packet only
            with av.open(str(path), "w") as probe:
                self._format_name = probe.format.name
        except (av.error.FFmpegError, ValueError) as exc:
            raise ValueError(f"cannot record to {path}: {exc}; use a .mp4, .mkv or .ts name") from None
        self.path = Path(path)
        self.fps = fps
        self.encoder = encoder
        self.crf = crf
        self.frames = 0
        """Frames encoded and handed to the file (it holds them once :meth:`stop` has closed it)."""
        self.failed_writes = 0
        """Frames whose encode failed (the recording goes on)."""
        self.dropped = 0
        """Frames not recorded: after a failed write had stopped the recording, or at the stop."""
        self.failed_output: str | None = None
        """Set at :meth:`stop` when the recording lost frames to a failed write (all of them, or
        all from one point on): why and what the file keeps (the run's report names the sink
        and ``edgepipe run`` exits 1)."""
        self._came = 0
        self._error: str | None = None
        self._file: RecordingFile | None = None
        self._stream: Any = None
        self._clock = RecordingClock(KEYFRAME_INTERVAL_MS)
        self._size: tuple[int, int] | None = None
        self._av_frame: Any = None
        self._colour: Colour | None = None
        """What the stream's pixels mean, taken from the first frame (tagged into the stream)."""
        self._lock = threading.Lock()  # process() and stop() take turns: one touches the container
        self._stopping = threading.Event()
        self._ticket = Ticket(self.path.name, "encode", 2, cancel=self._stopping, short=True)
        self._threads_tag = ticket_tag(self._ticket)
        """The encoder's threads are the node's encode (the CPU ledger)."""

    def start(self) -> None:
        try:
            ctx = current_node()
            self._ticket.set_owner(ctx.node_id, "encode", ctx.priority)
        except RuntimeError:
            pass
        try:
            check_writable_file(self.path)  # the file itself is opened at the first frame
        except ValueError as exc:
            raise OutputError(f"cannot record here: expected {exc}", path=str(self.path)) from None
        if not self._lock.acquire(timeout=STOP_WAIT_S):  # a restart: the last frame is stuck
            raise OutputError("the last recording's frame is still being written (a stalled disk?)",
                              path=str(self.path))  # fmt: skip
        try:
            self._file = RecordingFile(self.path, self._format_name)
            self._stream = None
            self._clock = RecordingClock(KEYFRAME_INTERVAL_MS)
            self.failed_output = self._error = None
            self._stopping.clear()
        finally:
            self._lock.release()

    def process(self, frame: Frame) -> None:
        with self._lock:
            file = self._file
            if self._stopping.is_set():  # a call that outlived the run's stop
                self.dropped += 1
                return
            if file is None:
                raise OutputError("recorder is not started", path=str(self.path))
            self._came += 1
            if file.broken is not None:
                self.dropped += 1  # said once, when it broke; counted in the end
                return
            size = (frame.width // 2 * 2, frame.height // 2 * 2)
            stream = self._stream
            if stream is None:
                stream = self._start(file, size, frame)
            elif size != self._size:
                log.warning("%s: frame size changed to %s; scaling to %s", self.path, size, self._size)
            self._encode(file, stream, self._to_av(frame))

    def _start(self, file: RecordingFile, size: tuple[int, int], frame: Frame) -> Any:
        """The stream, made at the first frame. A recording that cannot start fails here, once."""
        name = self.encoder
        try:
            if name == "auto":
                name = pick_encoder(*size)
            return self._open_stream(file, name, *size, Colour.of(frame))
        except RecordingFileError as exc:  # the file cannot be opened (its folder is gone)
            self.dropped += 1
            self._stopped(file, exc)
        except (OutputError, av.error.FFmpegError, OSError, ValueError) as exc:
            self.dropped += 1
            self._cannot_start(file, f"the encoder {name} cannot be set up: {exc}", exc)

    def _open_stream(self, file: RecordingFile, name: str, width: int, height: int, colour: Colour) -> Any:
        stream = file.open().add_stream(name, rate=Fraction(self.fps).limit_denominator(1000))
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p" if name == "libx264" else "nv12"
        # The encoders write these into the bitstream (H.264's VUI), the muxer into the container.
        colour.tag(stream.codec_context)
        self._colour = colour
        # Milliseconds, for the encoder as for the container: timestamps follow decode times,
        # and nothing rounds two frames onto one tick.
        stream.time_base = Fraction(1, 1000)
        stream.codec_context.time_base = Fraction(1, 1000)
        # A keyframe at least every second (a fragment each): every fps frames, and sooner by
        # the clock when frames come slower (RecordingClock forces one).
        stream.codec_context.gop_size = max(1, round(self.fps))
        stream.options = ENCODER_OPTIONS.get(name, {}) | ({"crf": str(self.crf)} if name == "libx264" else {})
        self._stream = stream
        self._size = (width, height)
        # The encoder's own pixel format (libx264 takes YUV420P): PyAV would otherwise convert
        # every frame through swscale into a new frame. Refilled for every frame (fill_av_frame).
        self._av_frame = av.VideoFrame(width, height, stream.pix_fmt)
        log.info("recording %s with %s (%dx%d, %s %s range)", self.path, name, width, height,
                 colour.matrix.upper(), "full" if colour.full_range else "limited")  # fmt: skip
        return stream

    def _to_av(self, frame: Frame) -> Any:
        assert self._size is not None
        assert self._colour is not None
        # A frame of another colour than the stream's (a source that changed) is converted.
        out = fill_av_frame(self._av_frame, frame, self._colour.matrix, self._colour.full_range)
        out.pts = self._clock.next_pts(frame)
        out.time_base = Fraction(1, 1000)
        out.pict_type = PictureType.I if self._clock.keyframe_due(out.pts) else PictureType.NONE
        return out

    def _encode(self, file: RecordingFile, stream: Any, av_frame: Any) -> None:
        opening = not stream.codec_context.is_open
        try:
            with gate().admit(self._ticket, timeout_s=ENCODE_WAIT_S):
                if opening:  # the first frame opens the encoder, which starts its threads
                    with threadname.native_threads(self._threads_tag):
                        packets = stream.encode(av_frame)
                else:
                    packets = stream.encode(av_frame)
        except AdmissionCancelled:  # the run stops: this frame is not recorded
            self.dropped += 1
            return
        except (av.error.FFmpegError, OSError) as exc:
            if opening and not isinstance(exc, AdmissionTimeout):  # never tried again per frame
                self.dropped += 1
                why = f"the encoder {stream.codec_context.name} does not start: {exc}"
                self._cannot_start(file, why, exc)
            self.failed_writes += 1
            self._error = self._error or str(exc)
            raise OutputError(f"cannot encode: {exc}", path=str(self.path)) from exc
        self._mux(file, packets)
        self.frames += 1

    def _mux(self, file: RecordingFile, packets: list[Any]) -> None:
        for packet in packets:
            if packet.is_keyframe and packet.pts is not None:
                self._clock.keyframe_made(packet.pts)
        try:
            file.mux(packets)
        except RecordingFileError as exc:
            if self._file is not None:  # a frame's, not stop()'s: that frame is lost too
                self.dropped += 1
            self._stopped(file, exc)

    def _stopped(self, file: RecordingFile, exc: OSError) -> NoReturn:
        """A write failed: the file is broken (cut back or removed); the encoder goes too."""
        file.abandon()
        self._stream = None  # the encoder's threads end with it; the container writes nothing more
        why = file.broken or str(exc)
        self._error = why
        kept = _kept_text(file.kept)
        raise OutputError(f"recording stopped: {why}; {kept}; the next frames are not recorded",
                          path=str(self.path)) from exc  # fmt: skip

    def _cannot_start(self, file: RecordingFile, why: str, exc: BaseException) -> NoReturn:
        file.abandon(why)  # nothing muxed: the file open() made is removed
        self._stream = None
        self._error = why
        raise OutputError(f"cannot start the recording: {why}; no frame will be recorded",
                          path=str(self.path)) from exc  # fmt: skip

    def stop(self) -> None:
        """Flush the encoder and close the file (its last fragment and index). Says what the file
        holds: a recording, nothing because no frame came (no file), or less than came
        (:attr:`failed_output`)."""
        self._stopping.set()
        gate().wake()  # a frame waiting for the CPU budget gives up (its ticket's cancel is set)
        if not self._lock.acquire(timeout=STOP_WAIT_S):
            file, self._file = self._file, None
            if file is not None:  # the container stays the frame's call's; its file is closed
                file.abandon(f"a frame's encode or write was still under way at stop "
                             f"(after {STOP_WAIT_S:.1f} s: a stalled disk or FIFO?)")  # fmt: skip
                self._report(file)
            return
        try:
            file, self._file = self._file, None
            if file is not None:
                self._close(file)
                self._report(file)
        finally:
            self._lock.release()

    def _close(self, file: RecordingFile) -> None:
        stream, self._stream = self._stream, None
        try:
            if stream is not None and file.broken is None:
                self._mux(file, list(stream.encode(None)))
            file.close()
        except OutputError:
            pass  # the file broke on the last frames: said in the report
        except (av.error.FFmpegError, OSError) as exc:  # the encoder's flush failed: close what is whole
            self._error = self._error or str(exc)
            with contextlib.suppress(RecordingFileError):
                file.close()

    def _report(self, file: RecordingFile) -> None:
        came = self._came
        if file.broken is None and file.kept.frames:
            failed = f" ({self.failed_writes} failed: {self._error})" if self.failed_writes else ""
            log.info("recorded %d frames to %s%s", file.kept.frames, self.path, failed)
        elif not came:
            log.info("%s: no frame came to record; nothing written", self.path)
        elif not file.kept.frames:
            self.failed_output = (
                f"{self.path}: nothing recorded of {came} frame(s): {self._error or file.broken}"
            )
            log.error("%s", self.failed_output)
        else:
            self.failed_output = (f"{self.path}: recording cut short ({file.broken}): "
                                  f"{_kept_text(file.kept)}, of {came} frame(s)")  # fmt: skip
            log.error("%s", self.failed_output)


def _kept_text(kept: Kept) -> str:
    if not kept.frames:
        return "nothing kept (no file left)"
    seconds = (kept.last_ms or 0) / 1000
    return f"the file keeps its first {seconds:.1f} s ({kept.frames} frames)"
