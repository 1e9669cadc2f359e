"""A frame as an encoder takes it: a PyAV ``VideoFrame`` holding its picture, tagged with what its
pixels mean (:class:`Colour`: FFmpeg's matrix, range, primaries and transfer tags).

Used by every encoder here: the recording (:mod:`edgepipe.media.recording.recorder`), the viewers' streams
(:mod:`edgepipe.serve.encoder`) and the event clips (:mod:`edgepipe.sinks.events.encode`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import av
import numpy as np

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
