"""Video in and out: sources (files, RTSP, cameras, synthetic), hardware decoders, NV12/I420
frames from bounded pools, drawing, pixelating and encoding."""

from __future__ import annotations

from edgepipe.media.draw import COLORS, blur_region, draw_box, draw_label, writable_copy
from edgepipe.media.errors import DecoderError, SourceError
from edgepipe.media.frame import I420, NV12, Frame, FramePool, FrameSize
from edgepipe.media.recording.recorder import Recorder
from edgepipe.media.sources.video import VideoSource
from edgepipe.media.url import SYNTHETIC_DEFAULT, SourceURL, parse

__all__ = [
    "COLORS",
    "I420",
    "NV12",
    "SYNTHETIC_DEFAULT",
    "DecoderError",
    "Frame",
    "FramePool",
    "FrameSize",
    "Recorder",
    "SourceError",
    "SourceURL",
    "VideoSource",
    "blur_region",
    "draw_box",
    "draw_label",
    "parse",
    "writable_copy",
]
