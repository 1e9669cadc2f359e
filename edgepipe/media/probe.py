"""Which decoders work here, found by decoding a small clip with each, not by listing names.

:func:`probe` makes a short clip per codec in memory (with FFmpeg's own software encoders), then
decodes it with every hardware candidate this FFmpeg build knows and with the software decoder.
:func:`choose` uses the same trial to pick a decoder for ``decoder="auto"``.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import av
import av.error
import numpy as np

from edgepipe.media import hw
from edgepipe.media.decode import describe_ffmpeg_error
from edgepipe.media.status import NO_HARDWARE

log = logging.getLogger(__name__)

# codec -> (encoder, raw container format) for the trial clip
TRIAL_ENCODERS: dict[str, tuple[str, str]] = {
    "h264": ("libx264", "h264"),
    "hevc": ("libx265", "hevc"),
    "vp9": ("libvpx-vp9", "ivf"),
    "av1": ("libsvtav1", "ivf"),
    "mjpeg": ("mjpeg", "mjpeg"),
}
TRIAL_SIZE = (320, 240)
TRIAL_FRAMES = 8


@dataclass(frozen=True, slots=True)
class Trial:
    """One decoder tried on one codec."""

    codec: str
    decoder: str
    """``software``, ``h264+cuda``, ``h264_v4l2m2m`` …"""
    hardware: bool
    works: bool
    frames: int
    ms: float
    reason: str
    """Why it does not work (or the output pixel format when it does)."""


@functools.cache
def trial_clip(codec: str) -> tuple[bytes, str] | None:
    """A few frames of ``codec`` in a raw container, or None if this build cannot encode it."""
    entry = TRIAL_ENCODERS.get(codec)
    if entry is None or entry[0] not in av.codecs_available:
        return None
    encoder, fmt = entry
    if encoder == "libsvtav1":
        os.environ.setdefault("SVT_LOG", "1")  # errors only: its banner is not for our users
    width, height = TRIAL_SIZE
    buf = io.BytesIO()
    yy, xx = np.mgrid[0:height, 0:width]
    with av.open(buf, "w", format=fmt) as container:
        stream: Any = container.add_stream(encoder, rate=10)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        if encoder == "libx265":
            stream.options = {"x265-params": "log-level=error"}
        for i in range(TRIAL_FRAMES):
            rgb = np.stack([(xx + 8 * i) % 256, (yy + 4 * i) % 256, (xx + yy) % 256], axis=-1).astype(
                np.uint8
            )
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buf.getvalue(), fmt


def try_decoder(codec: str, choice: hw.DecoderChoice) -> Trial:
    """Decode the trial clip of ``codec`` with ``choice``; never raises."""
    clip = trial_clip(codec)
    label = choice.label if choice.is_hardware else hw.SOFTWARE
    if clip is None:
        return Trial(codec, label, choice.is_hardware, False, 0, 0.0, "no encoder here to make a test clip")
    data, fmt = clip
    t0 = time.perf_counter()
    frames = 0
    out_format = "?"
    try:
        with av.open(io.BytesIO(data), format=fmt, hwaccel=choice.hwaccel_settings()) as opened:
            container: Any = opened
            stream = container.streams.video[0]
            ctx: Any = stream.codec_context
            if choice.decoder:
                ctx = av.codec.CodecContext.create(choice.decoder, "r")
                ctx.extradata = stream.codec_context.extradata
            for packet in container.demux(stream):
                for frame in ctx.decode(packet if packet.size else None):
                    frames += 1
                    out_format = frame.format.name
    except (av.error.FFmpegError, OSError, RuntimeError, ValueError) as exc:
        ms = (time.perf_counter() - t0) * 1e3
        return Trial(codec, label, choice.is_hardware, False, frames, ms, describe_ffmpeg_error(exc))
    ms = (time.perf_counter() - t0) * 1e3
    works = frames == TRIAL_FRAMES
    reason = out_format if works else f"decoded {frames} of {TRIAL_FRAMES} frames"
    return Trial(codec, label, choice.is_hardware, works, frames, ms, reason)


def probe(codecs: tuple[str, ...] = tuple(TRIAL_ENCODERS)) -> list[Trial]:
    """Every candidate decoder of every codec, tried here."""
    trials: list[Trial] = []
    for codec in codecs:
        for choice in hw.candidates(codec):
            trials.append(try_decoder(codec, choice))
        trials.append(try_decoder(codec, hw.DecoderChoice(codec)))
    return trials


def choose(codec: str) -> tuple[hw.DecoderChoice, str]:
    """The first hardware decoder that works for ``codec``, else software, with the reason.
    Cached per codec for the life of the process."""
    cached = hw.remembered(codec)
    if cached is not None:
        return cached
    failures = []
    for choice in hw.candidates(codec):
        trial = try_decoder(codec, choice)
        if trial.works:
            result = (choice, f"{choice.label} decodes {codec} here")
            hw.remember(codec, *result)
            return result
        failures.append(f"{trial.decoder}: {trial.reason}")
    why = NO_HARDWARE + (f" ({'; '.join(failures)})" if failures else " (none built in)")
    result = (hw.DecoderChoice(codec), why)
    hw.remember(codec, *result)
    return result
