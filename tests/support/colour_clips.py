"""Clips of a known colour in a known YCbCr matrix and range, made with PyAV for the colour tests.

The RGB -> YUV conversion is swscale's (told the matrix and range), not edgepipe's, so a test
that reads the clip back through edgepipe checks edgepipe against FFmpeg.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from edgepipe.media.colour import AVCOL_PRI_OF, AVCOL_SPC_OF, AVCOL_TRC_OF, SWS_CS_OF, Matrix

PATCH = (200, 40, 90)
"""A colour far enough from grey that BT.601 and BT.709 read it 10+ levels apart."""
BACKGROUND = (30, 140, 220)


def picture(width: int, height: int) -> np.ndarray:
    """RGB: the background with the patch over the middle half."""
    rgb = np.empty((height, width, 3), np.uint8)
    rgb[...] = BACKGROUND
    rgb[height // 4 : 3 * height // 4, width // 4 : 3 * width // 4] = PATCH
    return rgb


def make_colour_clip(
    path: Path,
    matrix: Matrix,
    full_range: bool,
    width: int,
    height: int,
    *,
    tagged: bool = True,
    frames: int = 3,
) -> Path:
    """An H.264 clip of :func:`picture` in ``matrix`` and range, tagged so in the stream (unless
    ``tagged`` is false: then nothing says how to read it)."""
    container = av.open(str(path), "w")
    stream = container.add_stream("libx264", rate=10)
    stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
    stream.options = {"crf": "1", "preset": "ultrafast"}
    ctx = stream.codec_context
    if tagged:
        ctx.colorspace, ctx.color_range = AVCOL_SPC_OF[matrix], 2 if full_range else 1
        ctx.color_primaries, ctx.color_trc = AVCOL_PRI_OF[matrix], AVCOL_TRC_OF[matrix]
    rgb = av.VideoFrame.from_ndarray(picture(width, height), format="rgb24")
    for i in range(frames):
        frame = rgb.reformat(format="yuv420p", dst_colorspace=SWS_CS_OF[matrix],
                             dst_color_range=2 if full_range else 1)  # fmt: skip
        frame.pts = i
        if not tagged:
            frame.colorspace, frame.color_range = 2, 0  # unspecified
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode(None):
        container.mux(packet)
    container.close()
    return path


def first_frame(path: Path) -> av.VideoFrame:
    """The clip's first decoded frame (PyAV's own decoder)."""
    with av.open(str(path)) as container:
        return next(container.decode(video=0))


def stream_tags(path: Path) -> tuple[int, int, int, int]:
    """What the stream says, as ffprobe shows it: (colorspace, color_range, primaries, trc)."""
    with av.open(str(path)) as container:
        ctx = container.streams.video[0].codec_context
        return ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc
