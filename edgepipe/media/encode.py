"""Encoding NV12/I420 frames to H.264 and recording them to MP4 (or MKV, TS).

:class:`Recorder` is a sink: ``p.sink("record", Recorder("out.mp4", fps=15), inputs=frames)``.
It picks a hardware H.264 encoder when one works here (NVENC, QSV, VAAPI, V4L2 M2M, VideoToolbox,
MediaCodec) and libx264 otherwise, with one log line saying which. Encoding is blocking work: it
runs on the sink's worker thread, never on the event loop. The stream is tagged with the colour
of the frames it gets (matrix, range, primaries, transfer), so players read the pixels as meant.

The path is checked before anything is encoded: a container format its extension names
(``ValueError`` at construction), an existing folder and a file that opens for writing
(``OutputError`` at ``start()``; no folder is created). The file's layout (a kill loses at most
the last second) and what a failed write leaves are :mod:`edgepipe.media.recfile`'s; a recording
that lost frames to one sets :attr:`Recorder.failed_output`: the run's report names it and
``edgepipe run`` exits 1.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn

import av
import av.error
import numpy as np
from av.video.frame import PictureType

from edgepipe.core import threadname
from edgepipe.core.context import current_node
from edgepipe.core.errors import OutputError
from edgepipe.core.params import check_writable_file
from edgepipe.media.colour import (
    AVCOL_PRI_OF,
    AVCOL_RANGE_JPEG,
    AVCOL_RANGE_MPEG,
    AVCOL_SPC_OF,
    AVCOL_TRC_OF,
    SWS_CS_OF,
    Matrix,
)
from edgepipe.media.frame import NV12, Frame
from edgepipe.media.recfile import KEYFRAME_INTERVAL_MS, Kept, RecordingFile, RecordingFileError
from edgepipe.media.rectime import RecordingClock
from edgepipe.sched.gate import Ticket, gate
from edgepipe.sched.ledger import ticket_tag

log = logging.getLogger(__name__)

H264_ENCODERS = ("h264_nvenc", "h264_qsv", "h264_vaapi", "h264_v4l2m2m", "h264_videotoolbox",
                 "h264_mediacodec", "libx264")  # fmt: skip

_working: dict[tuple[int, int], str] = {}
_lock = threading.Lock()


def _encoder_works(name: str, width: int, height: int) -> bool:
    try:
        ctx: Any = av.codec.CodecContext.create(name, "w")
        ctx.width, ctx.height, ctx.pix_fmt = width, height, "nv12" if name != "libx264" else "yuv420p"
        ctx.time_base = Fraction(1, 25)
        ctx.open()
        frame = av.VideoFrame(width, height, ctx.pix_fmt)
        ctx.encode(frame)
        ctx.encode(None)
    except (av.error.FFmpegError, OSError, ValueError, RuntimeError):
        return False
    return True


def pick_encoder(width: int, height: int) -> str:
    """The first H.264 encoder that encodes a frame here (cached per size)."""
    with _lock:
        if (width, height) in _working:
            return _working[(width, height)]
        for name in H264_ENCODERS:
            if name in av.codecs_available and _encoder_works(name, width, height):
                _working[(width, height)] = name
                return name
    raise OutputError("no H.264 encoder works here (not even libx264)", path="h264")


_UNSPECIFIED = 2  # AVCOL_PRI_UNSPECIFIED and AVCOL_TRC_UNSPECIFIED


@dataclass(frozen=True, slots=True)
class Colour:
    """What a stream's pixels mean (FFmpeg's four colour tags)."""

    matrix: Matrix
    full_range: bool
    primaries: int
    """AVColorPrimaries."""
    trc: int
    """AVColorTransferCharacteristic."""

    @classmethod
    def of(cls, frame: Frame) -> Colour:
        """A frame's colour: its matrix and range, and its decoder's primaries and transfer where
        they are tagged (else those that go with its matrix)."""
        av_frame = frame.av_frame
        primaries = av_frame.color_primaries if av_frame is not None else _UNSPECIFIED
        trc = av_frame.color_trc if av_frame is not None else _UNSPECIFIED
        if primaries in (0, _UNSPECIFIED):  # 0 is reserved: no tag either
            primaries = AVCOL_PRI_OF[frame.matrix]
        if trc in (0, _UNSPECIFIED):
            trc = AVCOL_TRC_OF[frame.matrix]
        return cls(frame.matrix, frame.full_range, primaries, trc)

    def tag(self, target: Any) -> None:
        """Write the colour into an ``av.VideoFrame``'s or a codec context's tags."""
        target.colorspace = AVCOL_SPC_OF[self.matrix]
        target.color_range = AVCOL_RANGE_JPEG if self.full_range else AVCOL_RANGE_MPEG
        target.color_primaries = self.primaries
        target.color_trc = self.trc


def to_av_nv12(
    frame: Frame, width: int, height: int, matrix: Matrix | None = None, full_range: bool | None = None
) -> Any:
    """A new NV12 ``av.VideoFrame`` of ``width`` x ``height`` holding ``frame``'s picture (no pts),
    tagged with its matrix and range.

    One copy into the encoder's input frame, so the source's frame can go back to its pool at
    once; a frame of another size (a mid-stream change), or asked for in another ``matrix`` or
    range than its own, is converted to them (through RGB: slow, for the rare frame).
    """
    return fill_av_frame(av.VideoFrame(width, height, "nv12"), frame, matrix, full_range)


def fill_av_frame(
    out: Any, frame: Frame, matrix: Matrix | None = None, full_range: bool | None = None
) -> Any:
    """``frame``'s picture copied into ``out``, an NV12 or YUV420P ``av.VideoFrame``, tagged with
    the matrix and range (no pts); returns ``out``.

    ``out`` is made writable first: when an encoder still holds the buffer it was last sent in,
    FFmpeg gives ``out`` a new one, so one frame can be refilled for every encode (libx264 copies
    what it is sent: with it, one buffer serves the whole stream, and no fresh pages are touched
    per frame). A frame of another size than ``out`` (a mid-stream change), or asked for in
    another ``matrix`` or range than its own, is converted into a new frame (through RGB: slow,
    for the rare frame), returned instead of ``out``.
    """
    w, h = out.width, out.height
    pix_fmt = out.format.name
    if pix_fmt not in ("nv12", "yuv420p"):
        raise ValueError(f"fill_av_frame writes NV12 or YUV420P frames, not {pix_fmt}")
    matrix = matrix or frame.matrix
    full_range = frame.full_range if full_range is None else full_range
    av_range = AVCOL_RANGE_JPEG if full_range else AVCOL_RANGE_MPEG
    same_colour = (matrix, full_range) == (frame.matrix, frame.full_range)
    fits = (frame.width, frame.height) == (w, h) or (frame.width // 2 * 2, frame.height // 2 * 2) == (w, h)
    if not (same_colour and fits):
        src = av.VideoFrame.from_ndarray(frame.to_rgb(), format="rgb24")
        out = src.reformat(width=w, height=h, format=pix_fmt, dst_colorspace=SWS_CS_OF[matrix],
                           dst_color_range=av_range)  # fmt: skip
    else:
        out.make_writable()  # before the planes are read: it may give the frame new buffers
        planes: Any = out.planes
        y = np.frombuffer(planes[0], np.uint8).reshape(h, planes[0].line_size)
        y[:, :w] = frame.y[:h, :w]
        u, v = frame.chroma()
        if pix_fmt == "yuv420p":
            for plane, src_plane in zip(planes[1:], (u, v), strict=True):
                dst = np.frombuffer(plane, np.uint8).reshape(h // 2, plane.line_size)
                dst[:, : w // 2] = src_plane[: h // 2, : w // 2]
        else:
            uv = np.frombuffer(planes[1], np.uint8).reshape(h // 2, planes[1].line_size)
            if frame.format == NV12:
                assert frame.uv is not None
                uv[:, :w] = frame.uv[: h // 2, : w // 2].reshape(h // 2, w)
            else:
                uv[:, 0:w:2] = u[: h // 2, : w // 2]
                uv[:, 1:w:2] = v[: h // 2, : w // 2]
    out.colorspace = AVCOL_SPC_OF[matrix]
    out.color_range = av_range
    return out


ENCODE_WAIT_S = 10.0
"""The longest an encode waits for the CPU budget (then the frame's write fails, counted)."""


class Recorder:
    """Writes every frame it receives to ``path`` as H.264 (a sink; blocking, so it runs on a
    worker thread). Timestamps follow the frames' media time, else their decode time
    (:mod:`edgepipe.media.rectime`); a keyframe comes at least every second, and an ``.mp4`` is
    fragmented MP4 (a fragment per keyframe; ``.mkv`` and ``.ts`` as they stream,
    :mod:`edgepipe.media.recfile`): a killed process leaves a file that plays up to its last
    second or so. Encodes are heavy calls: each enters the CPU budget
    (:mod:`edgepipe.sched.gate`) at high priority.

    A write that fails (a full disk, the file or its folder removed) stops the recording: the
    file keeps what it holds whole (nothing half-written; no file when it holds no frame), that
    frame's call raises ``OutputError`` (logged, counted as the node's error), the frames after
    it are counted and dropped, and :attr:`failed_output` says what was lost (the run exits 1)."""

    priority = "high"
    """Recording is the last thing the governor slows."""

    def __init__(self, path: str | Path, *, fps: float = 15.0, encoder: str = "auto", crf: int = 23) -> None:
        """Raises ``ValueError`` for an empty path, one whose extension names no container
        FFmpeg writes, an ``fps`` that is not a finite number above 0, a ``crf`` outside 0-51."""
        if not str(path).strip():
            raise ValueError("Recorder needs a file path (got an empty one)")
        if not (isinstance(fps, int | float) and math.isfinite(fps) and fps > 0):
            raise ValueError(f"Recorder fps must be a finite number above 0, got {fps!r}")
        if not (isinstance(crf, int) and 0 <= crf <= 51):
            raise ValueError(f"Recorder crf must be an integer in [0, 51] (23: the default), got {crf!r}")
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
        """Frames that came after a failed write had stopped the recording."""
        self.failed_output: str | None = None
        """Set at :meth:`stop` when the recording lost frames to a failed write (all of them, or
        all from one point on): why and what the file keeps (the run's report names the sink
        and ``edgepipe run`` exits 1)."""
        self._error: str | None = None
        self._file: RecordingFile | None = None
        self._stream: Any = None
        self._clock = RecordingClock(KEYFRAME_INTERVAL_MS)
        self._size: tuple[int, int] | None = None
        self._av_frame: Any = None
        self._colour: Colour | None = None
        """What the stream's pixels mean, taken from the first frame (tagged into the stream)."""
        self._ticket = Ticket(self.path.name, "encode", 2)
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
        self._file = RecordingFile(self.path, self._format_name)
        self._stream = None
        self._clock = RecordingClock(KEYFRAME_INTERVAL_MS)
        self.failed_output = self._error = None

    def process(self, frame: Frame) -> None:
        file = self._file
        if file is None:
            raise OutputError("recorder is not started", path=str(self.path))
        if file.broken is not None:
            self.dropped += 1  # said once, when it broke; counted in the end
            return
        size = (frame.width // 2 * 2, frame.height // 2 * 2)
        if self._stream is None:
            try:
                self._open_stream(file, *size, Colour.of(frame))
            except RecordingFileError as exc:  # the file cannot be opened (its folder is gone)
                self.dropped += 1
                self._stopped(file, exc)
        elif size != self._size:
            log.warning("%s: frame size changed to %s; scaling to %s", self.path, size, self._size)
        self._encode(file, self._to_av(frame))

    def _open_stream(self, file: RecordingFile, width: int, height: int, colour: Colour) -> None:
        name = pick_encoder(width, height) if self.encoder == "auto" else self.encoder
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

    def _to_av(self, frame: Frame) -> Any:
        assert self._size is not None
        assert self._colour is not None
        # A frame of another colour than the stream's (a source that changed) is converted.
        out = fill_av_frame(self._av_frame, frame, self._colour.matrix, self._colour.full_range)
        out.pts = self._clock.next_pts(frame)
        out.time_base = Fraction(1, 1000)
        out.pict_type = PictureType.I if self._clock.keyframe_due(out.pts) else PictureType.NONE
        return out

    def _encode(self, file: RecordingFile, av_frame: Any) -> None:
        try:
            with gate().admit(self._ticket, timeout_s=ENCODE_WAIT_S):
                if self._stream.codec_context.is_open:
                    packets = self._stream.encode(av_frame)
                else:  # the first frame opens the encoder, which starts its threads
                    with threadname.native_threads(self._threads_tag):
                        packets = self._stream.encode(av_frame)
        except (av.error.FFmpegError, OSError) as exc:
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

    def stop(self) -> None:
        """Flush the encoder and close the file (its last fragment and index). Says what the file
        holds: a recording, nothing because no frame came (no file), or less than came
        (:attr:`failed_output`)."""
        file, self._file = self._file, None
        if file is None:
            return
        stream, self._stream = self._stream, None
        try:
            if stream is not None and file.broken is None:
                self._mux(file, list(stream.encode(None)))
            file.close()
        except OutputError:
            pass  # the file broke on the last frames: said below
        except (av.error.FFmpegError, OSError) as exc:  # the encoder's flush failed: close what is whole
            self._error = self._error or str(exc)
            with contextlib.suppress(RecordingFileError):
                file.close()
        came = self.frames + self.failed_writes + self.dropped
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


ENCODER_OPTIONS: dict[str, dict[str, str]] = {
    "libx264": {"preset": "veryfast", "tune": "zerolatency", "forced-idr": "1"},
    "h264_nvenc": {"zerolatency": "1", "forced-idr": "1", "bf": "0"},
    "h264_qsv": {"async_depth": "1", "forced_idr": "1", "bf": "0"},
}
"""Per encoder. A keyframe asked for (``pict_type`` I) is an IDR frame, which starts a fragment.
Zero latency: each frame leaves the encoder as it goes in (no lookahead, no B-frames), so a kill
loses the open fragment only; libx264's default holds ~10 frames (0.7 s at 15 fps, 2 s at 5 fps)
that a kill would lose too (README, "Recording"; ``scripts/bench_recording.py``)."""


def _kept_text(kept: Kept) -> str:
    if not kept.frames:
        return "nothing kept (no file left)"
    seconds = (kept.last_ms or 0) / 1000
    return f"the file keeps its first {seconds:.1f} s ({kept.frames} frames)"
