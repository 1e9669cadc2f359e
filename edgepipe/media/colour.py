"""YCbCr <-> RGB: the BT.601 and BT.709 matrices, each in limited and full range, defined once.

::

    R = y * (Y - y_black)                  + rv * (V - 128)
    G = y * (Y - y_black) + gu * (U - 128) + gv * (V - 128)
    B = y * (Y - y_black) + bu * (U - 128)

Used by the tensor preprocessing (:mod:`edgepipe.media.tensor`), :meth:`Frame.to_rgb
<edgepipe.media.frame.Frame.to_rgb>`, :func:`~edgepipe.media.frame.from_rgb`, the drawing
colours (:mod:`edgepipe.media.draw`) and the ONNX preprocessing graph of
``scripts/bench/detect.py``, so that all of them make the same picture.

Which set a frame uses comes from its own tags (the decoder's ``colorspace`` and
``color_range``); :func:`guess_matrix` is the default for a frame that says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

Matrix = Literal["bt601", "bt709"]
MATRICES: tuple[Matrix, ...] = ("bt601", "bt709")

_LUMA_WEIGHTS: dict[str, tuple[float, float]] = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
"""(Kr, Kb) of each matrix (ITU-R BT.601 and BT.709); Kg = 1 - Kr - Kb."""

# FFmpeg's AVColorSpace values (libavutil/pixfmt.h) that name one of the two matrices. FCC and
# SMPTE 240M are within a percent of BT.601 and BT.709; anything else (unspecified, BT.2020, RGB)
# falls back to the guess by size.
_AVCOL_SPC: dict[int, Matrix] = {1: "bt709", 4: "bt601", 5: "bt601", 6: "bt601", 7: "bt709"}
AVCOL_SPC_OF: dict[Matrix, int] = {"bt601": 6, "bt709": 1}
"""The AVColorSpace a matrix is written as (BT.601 as SMPTE 170M, what x264 and browsers use)."""
AVCOL_PRI_OF: dict[Matrix, int] = {"bt601": 6, "bt709": 1}
"""The AVColorPrimaries written with each matrix (SMPTE 170M, BT.709)."""
AVCOL_TRC_OF: dict[Matrix, int] = {"bt601": 6, "bt709": 1}
"""The AVColorTransferCharacteristic written with each matrix (SMPTE 170M, BT.709)."""
Value = TypeVar("Value", float, np.ndarray)

SWS_CS_OF: dict[Matrix, int] = {"bt601": 5, "bt709": 1}
"""swscale's SWS_CS_ITU601 and SWS_CS_ITU709 (PyAV's ``reformat`` takes these colorspaces)."""
AVCOL_RANGE_MPEG = 1
AVCOL_RANGE_JPEG = 2


@dataclass(frozen=True, slots=True)
class YCbCr:
    """The factors of one matrix in one range (float32: the conversions run in float32)."""

    matrix: Matrix
    full_range: bool
    y: np.float32
    """Luma gain."""
    y_black: float
    """Luma of black (16 in limited range, 0 in full range)."""
    rv: np.float32
    gu: np.float32
    gv: np.float32
    bu: np.float32
    kr: float
    """Weight of red in luma (the forward direction)."""
    kb: float
    """Weight of blue in luma."""

    @property
    def y_white(self) -> float:
        """Luma of white (235 in limited range, 255 in full range)."""
        return 255.0 if self.full_range else 235.0

    def to_yuv(self, r: Value, g: Value, b: Value) -> tuple[Value, Value, Value]:
        """RGB (0..255: one colour, or planes) as unrounded (Y, U, V) in this matrix and range."""
        kr, kb = self.kr, self.kb
        luma = kr * r + (1 - kr - kb) * g + kb * b
        cb, cr = (b - luma) / (2 * (1 - kb)), (r - luma) / (2 * (1 - kr))
        if self.full_range:
            return luma, 128 + cb, 128 + cr
        return 16 + luma * 219 / 255, 128 + cb * 224 / 255, 128 + cr * 224 / 255


def _factors(matrix: Matrix, full_range: bool) -> YCbCr:
    kr, kb = _LUMA_WEIGHTS[matrix]
    kg = 1 - kr - kb
    # Limited range: luma spans 219 codes (16..235), chroma 224 (16..240), for 255 in RGB.
    y_gain, c_gain = (1.0, 1.0) if full_range else (255 / 219, 255 / 224)
    f32 = np.float32
    return YCbCr(
        matrix, full_range, f32(y_gain), 0.0 if full_range else 16.0,
        rv=f32(c_gain * 2 * (1 - kr)), gu=f32(-c_gain * 2 * kb * (1 - kb) / kg),
        gv=f32(-c_gain * 2 * kr * (1 - kr) / kg), bu=f32(c_gain * 2 * (1 - kb)), kr=kr, kb=kb,
    )  # fmt: skip


BT601_LIMITED = _factors("bt601", False)
"""Luma 16..235, chroma 16..240: what SD video decoders give."""
BT601_FULL = _factors("bt601", True)
"""Luma and chroma 0..255: JPEG, MJPEG webcams."""
BT709_LIMITED = _factors("bt709", False)
"""HD video: cameras, RTSP streams, most files."""
BT709_FULL = _factors("bt709", True)
"""HD video in full range (some IP cameras and phones)."""

_SETS = {(k.matrix, k.full_range): k for k in (BT601_LIMITED, BT601_FULL, BT709_LIMITED, BT709_FULL)}


def ycbcr(matrix: Matrix, full_range: bool) -> YCbCr:
    """The precomputed factors of ``matrix`` in that range (a lookup: no allocation)."""
    return _SETS[(matrix, full_range)]


def guess_matrix(width: int, height: int) -> Matrix:
    """The matrix of a picture whose stream does not say: BT.709 for HD, BT.601 for SD.

    The rule of FFmpeg's players and renderers: libplacebo's ``pl_color_system_guess_ycbcr``
    (what FFmpeg's ``vf_libplacebo`` uses) and mpv's ``mp_csp_guess_colorspace`` take
    ``width >= 1280 || height > 576`` as HD. (swscale alone assumes BT.601 for any size,
    which makes untagged HD video from a camera slightly off in colour.)
    """
    return "bt709" if width >= 1280 or height > 576 else "bt601"


def matrix_of(av_colorspace: int, width: int, height: int) -> Matrix:
    """The matrix an FFmpeg frame's ``colorspace`` (AVColorSpace) names, or the guess by size."""
    return _AVCOL_SPC.get(av_colorspace) or guess_matrix(width, height)
