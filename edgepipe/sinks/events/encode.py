"""The event recorder's encoder: a pipeline's output frames to H.264 packets, once.

Settings for a ring of packets that clips are cut from, not for a file made in one go: no
B-frames (a packet's pts is its dts, and any packet can end a clip), zero-latency tuning (a
frame's packet comes out of the encoder with it, not frames later) and an IDR at least every
``keyframe_interval_s`` of stream time, so that a clip's pre-roll can start on a keyframe close
to where it is asked to. The bitstream is Annex B with SPS/PPS before every IDR, so a clip cut
at any keyframe carries its own parameter sets.

Timestamps are in a 90 kHz time base and follow the frames' own media time where it moves
forward (a file processed faster than real time keeps its timing), else their decode time.

Blocking: :meth:`ClipEncoder.encode` runs on the recorder's worker thread. With libx264 the
encoder's input picture is allocated once and reused (x264 copies it in); a frame of another
size reopens the encoder.
"""

from __future__ import annotations

import logging
from fractions import Fraction
from typing import Any

import av
import av.error
import numpy as np
from av.video.frame import PictureType

from edgepipe.core import threadname
from edgepipe.media.frame import NV12, Frame
from edgepipe.media.recording.recorder import Colour, pick_encoder, to_av_nv12

log = logging.getLogger(__name__)

TIME_BASE = Fraction(1, 90_000)
TICKS_PER_S = 90_000

OPTIONS: dict[str, dict[str, str]] = {
    "libx264": {"preset": "veryfast", "tune": "zerolatency", "forced-idr": "1", "bf": "0"},
    "h264_nvenc": {"preset": "p1", "tune": "ull", "zerolatency": "1", "forced-idr": "1", "bf": "0"},
    "h264_qsv": {"preset": "veryfast", "async_depth": "1", "forced_idr": "1", "bf": "0"},
    "h264_videotoolbox": {"realtime": "1"},
}
"""Settings by FFmpeg encoder name (others get FFmpeg's defaults and no B-frames)."""


class ClipEncoder:
    """Encodes frames to H.264 packets with a keyframe at least every ``keyframe_interval_s``.

    ``encoder``: ``auto`` (hardware where one works here, else libx264) or an FFmpeg encoder
    name; ``crf`` the quality of libx264 (23: its default; lower is better and larger),
    ``bitrate_bps`` that of the others. Raises ``av.error.FFmpegError``, ``OSError`` or
    ``ValueError`` when the encoder cannot open or encode.
    """

    def __init__(self, *, encoder: str = "auto", keyframe_interval_s: float = 1.0, crf: int = 23,
                 bitrate_bps: int = 2_000_000) -> None:  # fmt: skip
        self.encoder = encoder
        self.keyframe_ticks = round(keyframe_interval_s * TICKS_PER_S)
        self.crf = crf
        self.bitrate_bps = bitrate_bps
        self.name = ""
        """The FFmpeg encoder in use (empty before the first frame)."""
        self.size: tuple[int, int] | None = None
        self.reopened = 0
        """Times the encoder was opened again for a frame of another size."""
        self._ctx: Any = None
        self._colour: Colour | None = None
        self._picture: Any = None  # libx264's reused input picture
        self._last_pts = -1
        self._last_key_pts: int | None = None
        self._key_wanted = False
        self._anchor: tuple[int, float] | None = None  # (pts, media seconds) where media time counts
        self._decoded_anchor: tuple[int, int] = (0, 0)  # (pts, t_decoded_ns)
        self._last_media_s: float | None = None
        self._step = 0  # the last frame time by media time (0: none)

    def encode(self, frame: Frame) -> list[Any]:
        """The packets ``frame`` gives (usually one), each with pts and dts in :data:`TIME_BASE`.
        The frame is copied: the caller keeps its lease. A frame of another size than the last
        reopens the encoder (:attr:`reopened`): the caller must not join its packets to older ones."""
        size = (frame.width // 2 * 2, frame.height // 2 * 2)
        if size != self.size:
            self._open(*size, Colour.of(frame))
        picture = self._picture_of(frame)
        pts = self._next_pts(frame)
        picture.pts = pts
        picture.time_base = TIME_BASE
        key = (
            self._key_wanted or self._last_key_pts is None or pts - self._last_key_pts >= self.keyframe_ticks
        )
        self._key_wanted = False
        # Reset when not forcing: the encoder would keep the type the picture was given.
        picture.pict_type = PictureType.I if key else PictureType.NONE
        packets: list[Any] = self._ctx.encode(picture)
        for packet in packets:
            packet.time_base = TIME_BASE
            if packet.is_keyframe:
                self._last_key_pts = packet.pts
        return packets

    def request_keyframe(self) -> None:
        """Make the next frame an IDR."""
        self._key_wanted = True

    def flush(self) -> list[Any]:
        """The packets the encoder still holds (none with zero-latency settings)."""
        if self._ctx is None:
            return []
        packets: list[Any] = self._ctx.encode(None)
        self._ctx = None
        self.size = None
        return packets

    def _open(self, width: int, height: int, colour: Colour) -> None:
        name = pick_encoder(width, height) if self.encoder == "auto" else self.encoder
        ctx: Any = av.CodecContext.create(name, "w")
        colour.tag(ctx)
        ctx.width, ctx.height = width, height
        ctx.pix_fmt = "yuv420p" if name == "libx264" else "nv12"
        ctx.time_base = TIME_BASE
        ctx.framerate = Fraction(30)  # libx264 budgets its rate over 1/time_base fps otherwise
        ctx.max_b_frames = 0
        ctx.gop_size = 10 * max(1, round(self.keyframe_ticks / TICKS_PER_S * 30))  # IDRs are forced
        options = dict(OPTIONS.get(name, {}))
        if name == "libx264":
            options["crf"] = str(self.crf)
        else:
            ctx.bit_rate = self.bitrate_bps
        ctx.options = options
        with threadname.native_threads():  # its threads are the calling thread's (the CPU ledger)
            ctx.open()
        if self._ctx is not None:
            self.reopened += 1
            log.info("event recordings: frame size changed to %dx%d; encoder reopened", width, height)
        else:
            log.info("event recordings: encoding with %s (%dx%d)", name, width, height)
        self._ctx, self.name, self.size, self._colour = ctx, name, (width, height), colour
        self._picture = None
        if name == "libx264":
            self._picture = av.VideoFrame(width, height, "yuv420p")
            colour.tag(self._picture)
        self._last_key_pts = None

    def _picture_of(self, frame: Frame) -> Any:
        colour = self._colour
        assert colour is not None
        assert self.size is not None
        w, h = self.size
        picture = self._picture
        same = (frame.matrix, frame.full_range) == (colour.matrix, colour.full_range)
        if picture is None or not same:
            # A hardware encoder may keep a reference to its input: a new picture each time (as
            # a frame of another colour is converted).
            out = to_av_nv12(frame, w, h, colour.matrix, colour.full_range)
            return out.reformat(format="yuv420p") if picture is not None else out
        y_plane, u_plane, v_plane = picture.planes
        y = np.frombuffer(y_plane, np.uint8).reshape(h, y_plane.line_size)
        u = np.frombuffer(u_plane, np.uint8).reshape(h // 2, u_plane.line_size)
        v = np.frombuffer(v_plane, np.uint8).reshape(h // 2, v_plane.line_size)
        y[:, :w] = frame.y[:h, :w]
        if frame.format == NV12:
            assert frame.uv is not None
            u[:, : w // 2] = frame.uv[: h // 2, : w // 2, 0]
            v[:, : w // 2] = frame.uv[: h // 2, : w // 2, 1]
        else:
            cb, cr = frame.chroma()
            u[:, : w // 2] = cb[: h // 2, : w // 2]
            v[:, : w // 2] = cr[: h // 2, : w // 2]
        return picture

    def _next_pts(self, frame: Frame) -> int:
        """Strictly increasing 90 kHz ticks: media time where it moves forward, else decode
        time, each measured from an anchor so that rounding never adds up."""
        media_s = frame.time_s
        decoded_ns = frame.t_decoded_ns
        last = self._last_pts
        if last < 0:
            pts = 0
            self._decoded_anchor = (0, decoded_ns)
            self._anchor = None if media_s is None else (0, media_s)
        elif media_s is not None and self._anchor is not None and self._last_media_s is not None \
                and media_s > self._last_media_s:  # fmt: skip
            pts = max(last + 1, self._anchor[0] + round((media_s - self._anchor[1]) * TICKS_PER_S))
            self._step = pts - last
            self._decoded_anchor = (pts, decoded_ns)
        elif media_s is None and self._step:
            # A frame without a timestamp amid timed ones (a decoder's last frames at the end of
            # a file): one frame time on, not the speed it was processed at.
            pts = last + self._step
            self._decoded_anchor = (pts, decoded_ns)
        else:  # no media time, or it went back (a camera's clock reset): decode time carries on
            anchor_pts, anchor_ns = self._decoded_anchor
            pts = max(last + 1, anchor_pts + round((decoded_ns - anchor_ns) * TICKS_PER_S / 1e9))
            self._anchor = None if media_s is None else (pts, media_s)
            self._step = 0
        self._last_pts, self._last_media_s = pts, media_s
        return pts
