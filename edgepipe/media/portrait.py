"""The synthetic scene's face: a public-domain portrait, scaled once, drawn into NV12 by slicing.

The picture (``data/astronaut.png``, NASA's photo of Eileen Collins as shipped in
scikit-image; ``data/README.md`` says where it comes from and ``scripts/make_portrait.py`` makes
it) is package data, read with PyAV, so a first run of any pipeline on ``synthetic://`` shows a
face that a face detector finds. :class:`Portrait` converts it once to the scene's size and
colours (BT.601 limited range); :meth:`Portrait.draw` only masks it into the frame in place, with
no allocation per frame.
"""

from __future__ import annotations

import functools
import io
from importlib import resources
from typing import Any

import av
import numpy as np

from edgepipe.media.colour import AVCOL_RANGE_MPEG, SWS_CS_OF, Matrix

PICTURE = "data/astronaut.png"
"""The portrait, relative to this package."""
HEIGHT_FRAC = 0.3
"""The portrait's height as a share of the scene's: a face CenterFace finds at its default input
size (640) on every scene from 320x240 to 1920x1080."""
MIN_HEIGHT_PX = 8
"""Below this (a scene under 28 px high) no portrait is drawn."""


@functools.cache
def picture_rgb() -> np.ndarray:
    """The portrait as (H, W, 3) RGB, decoded once per process (read-only)."""
    data = resources.files("edgepipe.media").joinpath(PICTURE).read_bytes()
    with av.open(io.BytesIO(data), "r", format="png_pipe") as container:
        rgb = next(container.decode(video=0)).to_ndarray(format="rgb24")
    rgb.flags.writeable = False
    return rgb


class Portrait:
    """The portrait at one size, as NV12 planes and masks made once.

    ``height`` is rounded down to even and the width follows the picture's aspect (even too),
    so the portrait sits on whole 2x2 chroma blocks wherever :meth:`draw` puts it.
    """

    def __init__(self, height: int, matrix: Matrix = "bt601") -> None:
        rgb = picture_rgb()
        h = height // 2 * 2
        w = max(2, round(h * rgb.shape[1] / rgb.shape[0] / 2) * 2)
        self.height, self.width = h, w
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        nv12 = frame.reformat(width=w, height=h, format="nv12", dst_colorspace=SWS_CS_OF[matrix],
                              dst_color_range=AVCOL_RANGE_MPEG, interpolation="BICUBIC")  # fmt: skip
        y_plane: Any
        uv_plane: Any
        y_plane, uv_plane = nv12.planes
        # Clipped to the nominal limited range, as the scene's own noise is: bicubic scaling
        # rings a little past black and white at sharp edges.
        y = np.frombuffer(y_plane, np.uint8).reshape(h, y_plane.line_size)[:, :w].clip(16, 235)
        uv = np.frombuffer(uv_plane, np.uint8).reshape(h // 2, uv_plane.line_size)[:, :w].clip(16, 240)
        # An oval around head and shoulders: the photo's own background stays out of the scene.
        self.mask = _oval(h, w)
        """Where the portrait covers the scene, (H, W) bool."""
        uv_mask = np.repeat(_oval(h // 2, w // 2)[:, :, None], 2, axis=2)
        # Drawn as (scene AND keep) OR face, in place: a masked copy (np.copyto's where=) costs
        # seven times as much, and this runs on every frame.
        self._y = np.where(self.mask, y, 0).astype(np.uint8)
        self._keep_y = np.where(self.mask, 0, 255).astype(np.uint8)
        self._uv = np.where(uv_mask, uv.reshape(h // 2, w // 2, 2), 0).astype(np.uint8)
        self._keep_uv = np.where(uv_mask, 0, 255).astype(np.uint8)

    def draw(self, y: np.ndarray, uv: np.ndarray, x0: int, y0: int) -> None:
        """The portrait with its top-left corner at (``x0``, ``y0``), both even, inside ``y``
        (H, W) and ``uv`` (H/2, W/2, 2), in place; raises ValueError if it does not fit there."""
        h, w = self.height, self.width
        if x0 % 2 or y0 % 2 or x0 < 0 or y0 < 0 or y0 + h > y.shape[0] or x0 + w > y.shape[1]:
            raise ValueError(f"a {w}x{h} portrait does not fit at ({x0}, {y0}) in {y.shape[1]}x{y.shape[0]}")
        region = y[y0 : y0 + h, x0 : x0 + w]
        np.bitwise_and(region, self._keep_y, out=region)
        np.bitwise_or(region, self._y, out=region)
        region = uv[y0 // 2 : (y0 + h) // 2, x0 // 2 : (x0 + w) // 2]
        np.bitwise_and(region, self._keep_uv, out=region)
        np.bitwise_or(region, self._uv, out=region)


def _oval(height: int, width: int) -> np.ndarray:
    yy, xx = np.ogrid[0:height, 0:width]
    ny = (yy + 0.5 - height / 2) / (height / 2)
    nx = (xx + 0.5 - width / 2) / (width / 2)
    mask: np.ndarray = ny * ny + nx * nx <= 1.0
    return mask
