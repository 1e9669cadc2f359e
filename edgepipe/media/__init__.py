"""Video in and out: sources (files, RTSP, cameras, synthetic), hardware decoders, NV12/I420
frames from bounded pools, drawing, blurring and encoding."""

from __future__ import annotations

from edgepipe.media.errors import DecoderError, SourceError
from edgepipe.media.frame import I420, NV12, Frame, FramePool
from edgepipe.media.source import VideoSource
from edgepipe.media.url import SYNTHETIC_DEFAULT, SourceURL, parse

__all__ = [
    "I420",
    "NV12",
    "SYNTHETIC_DEFAULT",
    "DecoderError",
    "Frame",
    "FramePool",
    "SourceError",
    "SourceURL",
    "VideoSource",
    "parse",
]
