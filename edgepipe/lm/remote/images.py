"""Pictures for an engine that takes them: a source's latest frame as a JPEG ``data:`` URI.

Two steps, so that neither holds a frame nor blocks the event loop:

- :func:`thumbnail` (on the loop, as a frame passes): every k-th pixel of the frame's planes,
  k the smallest step that brings the long side to at most ``side`` pixels: a small I420 copy
  (at 1080p and 512 px, 480x270: about 190 kB, a fraction of a millisecond), owned, so the frame
  goes back to its pool at once;
- :func:`jpeg_data_uri` (on a worker thread, when a request is written): that copy encoded as
  JPEG by FFmpeg's ``mjpeg`` encoder (PyAV), full range, as ``data:image/jpeg;base64,...``;
  re-encoded coarser while it is over the request's byte budget, and given up (None) if even
  the coarsest is.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

QUALITIES = (4, 8, 16, 31)
"""``qscale`` values tried in turn (2 best, 31 coarsest) while the JPEG is over budget."""


@dataclass(frozen=True, slots=True)
class Thumbnail:
    """A frame's small I420 copy: Y, then U and V at half its size, one contiguous array."""

    i420: np.ndarray
    width: int
    height: int
    full_range: bool
    source: str
    t: float


def thumbnail(frame: Any, side: int, t: float) -> Thumbnail:
    """Every k-th pixel of ``frame`` (an :class:`~edgepipe.media.Frame`), at most ``side`` on its
    long side; even width and height (JPEG's 4:2:0)."""
    step = max(1, math.ceil(max(frame.width, frame.height) / side))
    y = frame.y[::step, ::step]
    u, v = frame.chroma()
    height, width = (y.shape[0] // 2) * 2, (y.shape[1] // 2) * 2
    i420 = np.empty((height * 3 // 2, width), np.uint8)
    i420[:height] = y[:height, :width]
    chroma = i420[height:].reshape(2, height // 2, width // 2)
    for plane, into in ((u, chroma[0]), (v, chroma[1])):
        small = plane[::step, ::step]
        into[: small.shape[0], : small.shape[1]] = small[: height // 2, : width // 2]
    return Thumbnail(i420, width, height, bool(getattr(frame, "full_range", False)),
                     str(getattr(frame, "source_id", "")), t)  # fmt: skip


def jpeg_bytes(thumb: Thumbnail, qscale: int) -> bytes:
    import av

    picture = av.VideoFrame.from_ndarray(thumb.i420, format="yuv420p")
    picture = picture.reformat(format="yuvj420p") if not thumb.full_range else picture
    codec = av.CodecContext.create("mjpeg", "w")
    codec.width, codec.height = thumb.width, thumb.height
    codec.pix_fmt = "yuvj420p"
    codec.time_base = Fraction(1, 25)
    codec.options = {"qmin": str(qscale), "qmax": str(qscale)}
    packets = [*codec.encode(picture), *codec.encode(None)]
    return b"".join(bytes(p) for p in packets)


def jpeg_data_uri(thumb: Thumbnail, max_bytes: int) -> str | None:
    """The thumbnail as a JPEG ``data:`` URI of at most ``max_bytes`` (base64 counted), or None
    when even the coarsest encoding is over. Blocking: call it on a worker thread."""
    for qscale in QUALITIES:
        data = jpeg_bytes(thumb, qscale)
        uri = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
        if len(uri) <= max_bytes:
            return uri
    return None


__all__ = ["Thumbnail", "jpeg_bytes", "jpeg_data_uri", "thumbnail"]
