"""Drawing on NV12 and I420 planes: boxes, labels, pixelated regions. No RGB round trip.

Everything here writes into the planes it is given, so give it a frame you own (a copy from
:func:`writable_copy`, or an encoder's input buffer): a decoder's own frames are read-only,
because it still uses their pixels as references for the frames that follow.

Colours are (R, G, B) triples, 0..255; :data:`COLORS` has a few. Each is converted for the
frame it is drawn on (its matrix, BT.601 or BT.709, and its range), so green is the same green on
an SD camera, an HD one and a full-range webcam. Boxes are ``(x0, y0, x1, y1)`` in pixels,
clipped to the frame.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from edgepipe.media.colour import Matrix, ycbcr
from edgepipe.media.font import GLYPH_H, GLYPH_W, glyph
from edgepipe.media.frame import I420, NV12, Frame, FramePool, nv12_views

Color = tuple[int, int, int]
"""(R, G, B), 0..255."""

COLORS: dict[str, Color] = {
    "green": (0, 255, 0),
    "red": (255, 0, 0),
    "yellow": (255, 255, 0),
    "blue": (0, 0, 255),
    "white": (255, 255, 255),
    "black": (0, 0, 0),
}


@lru_cache(maxsize=256)
def yuv_of(color: Color, matrix: Matrix, full_range: bool) -> tuple[int, int, int]:
    """``color`` as the (Y, U, V) codes of frames in ``matrix`` and range (cached: drawing the
    same colour on every frame converts it once)."""
    y, u, v = ycbcr(matrix, full_range).to_yuv(*(float(c) for c in color))
    return tuple(int(min(255.0, max(0.0, c + 0.5))) for c in (y, u, v))  # type: ignore[return-value]


def frame_yuv(frame: Frame, color: Color) -> tuple[int, int, int]:
    """``color`` as (Y, U, V) codes of ``frame`` (its matrix and range)."""
    return yuv_of(color, frame.matrix, frame.full_range)


def writable_copy(frame: Frame, pool: FramePool | None = None) -> Frame:
    """A copy of ``frame`` in one contiguous buffer, safe to draw on, in the frame's own layout:
    I420 stays I420 and NV12 stays NV12 (a change of layout is a pass over the chroma, and an
    encoder that takes the other one pays a second to change it back).

    With ``pool``, the buffer is one of the pool's while a slot is free (it goes back when the
    copy's last holder releases it), a new one otherwise: a stage that copies every frame then
    refills the same few buffers instead of touching fresh pages for each one (a frame-sized
    allocation is a new mapping every time under edgepipe's fixed mmap threshold, see
    :mod:`edgepipe.runtime.malloc`: at 720p that cost more than the copy itself)."""
    w, h = frame.width, frame.height
    nbytes = w * h * 3 // 2
    slot = pool.try_acquire() if pool is not None else None
    buf = np.empty(nbytes, np.uint8) if pool is None or slot is None else pool.buffer(slot, nbytes)
    common: dict[str, Any] = {
        "pts": frame.pts, "time_base": frame.time_base, "source_id": frame.source_id, "seq": frame.seq,
        "t_decoded_ns": frame.t_decoded_ns, "full_range": frame.full_range, "matrix": frame.matrix,
        "pool": pool if slot is not None else None, "slot": -1 if slot is None else slot,
    }  # fmt: skip
    if frame.format == NV12:
        assert frame.uv is not None
        y, uv = nv12_views(buf, w, h)
        np.copyto(y, frame.y)
        np.copyto(uv, frame.uv[: h // 2, : w // 2])
        return Frame(format=NV12, y=y, uv=uv, **common)
    ysize, csize = w * h, (h // 2) * (w // 2)
    y = buf[:ysize].reshape(h, w)
    u = buf[ysize : ysize + csize].reshape(h // 2, w // 2)
    v = buf[ysize + csize : ysize + 2 * csize].reshape(h // 2, w // 2)
    np.copyto(y, frame.y)
    src_u, src_v = frame.chroma()
    np.copyto(u, src_u[: h // 2, : w // 2])
    np.copyto(v, src_v[: h // 2, : w // 2])
    return Frame(format=I420, y=y, u=u, v=v, **common)


def _clip_box(frame: Frame, box: tuple[float, float, float, float]) -> tuple[int, int, int, int] | None:
    x0, y0, x1, y1 = (round(v) for v in box)
    x0, x1 = max(0, min(x0, x1)), min(frame.width, max(x0, x1))
    y0, y1 = max(0, min(y0, y1)), min(frame.height, max(y0, y1))
    if x1 - x0 < 1 or y1 - y0 < 1:
        return None
    return x0, y0, x1, y1


def _fill(frame: Frame, x0: int, y0: int, x1: int, y1: int, yuv: tuple[int, int, int]) -> None:
    frame.y[y0:y1, x0:x1] = yuv[0]
    u, v = frame.chroma()
    cx0, cy0, cx1, cy1 = x0 // 2, y0 // 2, (x1 + 1) // 2, (y1 + 1) // 2
    u[cy0:cy1, cx0:cx1] = yuv[1]
    v[cy0:cy1, cx0:cx1] = yuv[2]


def draw_box(
    frame: Frame, box: tuple[float, float, float, float], color: Color = COLORS["green"], thickness: int = 2
) -> None:
    """A rectangle outline in ``color`` (RGB)."""
    clipped = _clip_box(frame, box)
    if clipped is None:
        return
    x0, y0, x1, y1 = clipped
    t = max(1, min(thickness, (x1 - x0) // 2 or 1, (y1 - y0) // 2 or 1))
    yuv = frame_yuv(frame, color)
    _fill(frame, x0, y0, x1, y0 + t, yuv)
    _fill(frame, x0, y1 - t, x1, y1, yuv)
    _fill(frame, x0, y0, x0 + t, y1, yuv)
    _fill(frame, x1 - t, y0, x1, y1, yuv)


def draw_label(
    frame: Frame, x: float, y: float, text: str, color: Color = COLORS["green"], scale: int = 2
) -> None:
    """``text`` in a tag filled with ``color`` (RGB) whose bottom-left corner is at (x, y) (above
    a box's corner); the ink is black on a light tag, white on a dark one."""
    scale = max(1, scale)
    pad = scale
    width = len(text) * (GLYPH_W + 1) * scale + 2 * pad
    height = GLYPH_H * scale + 2 * pad
    x0 = int(max(0, min(x, frame.width - width)))
    y0 = int(max(0, min(y - height, frame.height - height)))
    if frame.width < width or frame.height < height:
        return
    yuv = frame_yuv(frame, color)
    _fill(frame, x0, y0, x0 + width, y0 + height, yuv)
    k = frame.ycbcr
    ink = int(k.y_black if yuv[0] > (k.y_black + k.y_white) / 2 else k.y_white)
    for i, ch in enumerate(text):
        mask = glyph(ch)
        if scale > 1:
            mask = np.repeat(np.repeat(mask, scale, axis=0), scale, axis=1)
        gx = x0 + pad + i * (GLYPH_W + 1) * scale
        gy = y0 + pad
        region = frame.y[gy : gy + mask.shape[0], gx : gx + mask.shape[1]]
        region[mask[: region.shape[0], : region.shape[1]]] = ink


def blur_region(frame: Frame, box: tuple[float, float, float, float], block: int = 0) -> None:
    """Pixelate ``box`` (face privacy): each ``block`` x ``block`` cell becomes its mean. The
    default block is an eighth of the box's shorter side, which makes a face unrecognisable."""
    clipped = _clip_box(frame, box)
    if clipped is None:
        return
    x0, y0, x1, y1 = clipped
    x0, y0 = x0 // 2 * 2, y0 // 2 * 2  # even, so that chroma cells line up
    block = block or max(4, min(x1 - x0, y1 - y0) // 8)
    block += block % 2
    _pixelate(frame.y, x0, y0, x1, y1, block)
    u, v = frame.chroma()
    for plane in (u, v):
        _pixelate(plane, x0 // 2, y0 // 2, (x1 + 1) // 2, (y1 + 1) // 2, block // 2)


def _pixelate(plane: np.ndarray, x0: int, y0: int, x1: int, y1: int, block: int) -> None:
    region = plane[y0:y1, x0:x1]
    h, w = region.shape
    hb, wb = h // block * block, w // block * block
    if hb and wb:
        cells = region[:hb, :wb].reshape(hb // block, block, wb // block, block)
        means = cells.mean(axis=(1, 3), dtype=np.float32).astype(np.uint8)
        region[:hb, :wb] = np.repeat(np.repeat(means, block, axis=0), block, axis=1)
    # Edges narrower than a block: one cell each.
    if hb < h:
        region[hb:, :] = region[hb:, :].mean(dtype=np.float32).astype(np.uint8)
    if wb < w:
        region[:hb, wb:] = region[:hb, wb:].mean(dtype=np.float32).astype(np.uint8)
