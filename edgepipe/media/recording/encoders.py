"""Which H.264 encoder records here, and how it is set up.

:func:`pick_encoder` takes the first of :data:`H264_ENCODERS` that encodes a frame on this
machine (hardware first, libx264 last); :func:`check_encoder` refuses, at declaration, a name
FFmpeg has no video encoder for; :data:`ENCODER_OPTIONS` are each encoder's settings for a
recording that a kill cuts short by at most a keyframe interval.
"""

from __future__ import annotations

import threading
from fractions import Fraction
from typing import Any

import av
import av.codec
import av.error

from edgepipe.core.errors import OutputError

H264_ENCODERS = ("h264_nvenc", "h264_qsv", "h264_vaapi", "h264_v4l2m2m", "h264_videotoolbox",
                 "h264_mediacodec", "libx264")  # fmt: skip

ENCODER_OPTIONS: dict[str, dict[str, str]] = {
    "libx264": {"preset": "veryfast", "tune": "zerolatency", "forced-idr": "1"},
    "h264_nvenc": {"zerolatency": "1", "forced-idr": "1", "bf": "0"},
    "h264_qsv": {"async_depth": "1", "forced_idr": "1", "bf": "0"},
}
"""Per encoder. A keyframe asked for (``pict_type`` I) is an IDR frame, which starts a fragment.
Zero latency: each frame leaves the encoder as it goes in (no lookahead, no B-frames), so a kill
loses the open fragment only; libx264's default holds ~10 frames (0.7 s at 15 fps, 2 s at 5 fps)
that a kill would lose too (docs/recording.md; ``scripts/bench/recording.py``)."""

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


def check_encoder(name: str) -> None:
    """Raises ``ValueError`` unless ``name`` is ``auto`` or a video encoder FFmpeg has here
    (it may still fail to start: a hardware encoder without its device)."""
    if name == "auto":
        return
    try:
        kind = av.codec.Codec(name, "w").type
    except (ValueError, TypeError):  # UnknownCodecError is a ValueError
        kind = None
    if kind != "video":
        here = ", ".join(h264_encoders_here())
        raise ValueError(f"Recorder encoder {name!r} is not a video encoder FFmpeg has here "
                         f"(H.264 ones: {here}); 'auto' picks one that works")  # fmt: skip


def h264_encoders_here() -> list[str]:
    """The H.264 encoders this FFmpeg build has (a hardware one may lack its device)."""
    h264 = av.codec.Codec("h264", "r").id
    names = set()
    for name in av.codecs_available:
        try:
            codec = av.codec.Codec(name, "w")
        except (ValueError, TypeError):
            continue
        if codec.type == "video" and codec.id == h264:
            names.add(codec.name)  # "h264" names the default one (libx264)
    return sorted(names)
