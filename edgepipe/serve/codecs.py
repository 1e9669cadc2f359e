"""The encoders a live view can use, with settings for watching, not for files.

:func:`open_live` opens one: ``auto`` is the first H.264 encoder that works here (a hardware
one, NVENC, QSV, V4L2 M2M, VideoToolbox, MediaCodec, through the same trial as the recorder's
:func:`~edgepipe.media.recording.recorder.pick_encoder`), falling back to libx264 when the hardware one
refuses the live settings; ``libvpx`` is VP8, for peers that offer no H.264.

Live settings everywhere: no B-frames (a frame is sent as soon as it is encoded), the lowest
latency mode the encoder has, constrained baseline H.264 (what every browser decodes), IDRs
only when asked (the caller forces them: every 2 s, a viewer joining or sending PLI/FIR).
"""

from __future__ import annotations

import logging
from fractions import Fraction
from typing import Any

import av
import av.error

from edgepipe.media.recording.recorder import Colour, pick_encoder

log = logging.getLogger(__name__)

LIVE_OPTIONS: dict[str, dict[str, str]] = {
    # x264's "baseline" is constrained baseline (no FMO/ASO).
    "libx264": {"preset": "veryfast", "tune": "zerolatency", "profile": "baseline", "forced-idr": "1",
                "bf": "0", "level": "31"},
    "h264_nvenc": {"preset": "p1", "tune": "ull", "zerolatency": "1", "delay": "0", "profile": "baseline",
                   "forced-idr": "1", "bf": "0", "rc": "cbr"},
    "h264_qsv": {"preset": "veryfast", "profile": "baseline", "async_depth": "1", "forced_idr": "1",
                 "bf": "0"},
    "h264_v4l2m2m": {},
    "h264_videotoolbox": {"realtime": "1", "profile": "baseline", "allow_sw": "0"},
    "h264_mediacodec": {},
    # VP8: realtime deadline, no frame lag (no alt-ref), the fastest speed.
    "libvpx": {"deadline": "realtime", "cpu-used": "8", "lag-in-frames": "0", "auto-alt-ref": "0",
               "error-resilient": "1"},
}  # fmt: skip
"""Live settings by FFmpeg encoder name."""

SOFTWARE = ("libx264", "libvpx")
"""Encoders that take ``yuv420p`` (the hardware ones take ``nv12``)."""


def open_live(
    codec: str, width: int, height: int, bitrate_bps: int, time_base: Fraction, colour: Colour | None = None
) -> Any:
    """An open encoder context for a live view; ``codec`` an FFmpeg encoder name or ``auto``
    (the best H.264 encoder here); ``colour`` what the pixels mean (tagged in the stream, so a
    browser converts them with the right matrix and range). Raises ``av.error.FFmpegError``,
    ``OSError`` or ``ValueError`` when it cannot open (with ``auto``: when not even libx264 can)."""
    if codec != "auto":
        return _open(codec, width, height, bitrate_bps, time_base, colour)
    name = pick_encoder(width, height)
    if name == "libx264":
        return _open(name, width, height, bitrate_bps, time_base, colour)
    try:
        return _open(name, width, height, bitrate_bps, time_base, colour)
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        log.warning("%s works here but not with live settings (%s): libx264 instead", name, exc)
        return _open("libx264", width, height, bitrate_bps, time_base, colour)


def _open(
    name: str, width: int, height: int, bitrate_bps: int, time_base: Fraction, colour: Colour | None
) -> Any:
    ctx: Any = av.CodecContext.create(name, "w")
    if colour is not None:
        colour.tag(ctx)
    ctx.width, ctx.height = width, height
    ctx.pix_fmt = "yuv420p" if name in SOFTWARE else "nv12"
    ctx.time_base = time_base
    ctx.framerate = Fraction(30)  # else libx264 budgets bit_rate over 1/time_base = 90000 fps
    ctx.bit_rate = bitrate_bps
    ctx.max_b_frames = 0
    ctx.options = dict(LIVE_OPTIONS.get(name, {}))
    ctx.open()
    return ctx
