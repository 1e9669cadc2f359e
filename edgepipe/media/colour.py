"""BT.601 YCbCr -> RGB factors, limited range (video) and full range (JPEG), defined once.

::

    R = y * (Y - y_black)                + rv * (V - 128)
    G = y * (Y - y_black) + gu * (U - 128) + gv * (V - 128)
    B = y * (Y - y_black) + bu * (U - 128)

Used by the tensor preprocessing (:mod:`edgepipe.media.tensor`), :meth:`Frame.to_rgb
<edgepipe.media.frame.Frame.to_rgb>` and the ONNX preprocessing graph of
``scripts/bench_detect.py``, so that all of them make the same picture.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Bt601:
    """The factors of one range (float32: the conversions run in float32)."""

    y: np.float32
    """Luma gain."""
    y_black: float
    """Luma of black (16 in limited range, 0 in full range)."""
    rv: np.float32
    gu: np.float32
    gv: np.float32
    bu: np.float32


BT601_LIMITED = Bt601(
    np.float32(1.164), 16.0, np.float32(1.596), np.float32(-0.392), np.float32(-0.813), np.float32(2.017)
)
"""Luma 16..235, chroma 16..240: what video decoders give."""

BT601_FULL = Bt601(
    np.float32(1.0), 0.0, np.float32(1.402), np.float32(-0.344), np.float32(-0.714), np.float32(1.772)
)
"""Luma and chroma 0..255: JPEG, MJPEG webcams (``Frame.full_range``)."""
