"""NV12/I420 frames into a model's input tensor: letterbox, colour conversion, normalization.

No full-resolution RGB image is ever made. Two ways, chosen per frame (``method="auto"``):

- ``swscale``: the decoder's own frame (kept by the :class:`Frame`) is scaled and converted to
  planar RGB by FFmpeg's swscale in one SIMD pass at the *output* size; numpy then writes the
  three small planes into the tensor with the normalization folded into one multiply-add.
- ``numpy``: for frames that have no decoder frame behind them (synthetic video, copies), the
  output pixels pick their nearest source pixel from the Y and chroma planes by precomputed
  indices, and the BT.601 conversion runs on the small planes only.

``scripts/bench_detect.py`` measures both against OpenCV's ``cvtColor`` + ``resize``; swscale is
the fastest where it applies, numpy beats OpenCV too (see the issue notes for figures).

Buffers (the tensors, the index maps, the float scratch planes) are made when the geometry
changes and reused for every later frame. Two output tensors alternate, so a run that still
reads one (abandoned at a deadline) is never overwritten by the next frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from edgepipe.media.frame import NV12, Frame

Method = Literal["auto", "swscale", "numpy"]


@dataclass(frozen=True, slots=True)
class TensorFormat:
    """What the model wants as input."""

    width: int
    height: int
    layout: Literal["nchw", "nhwc"] = "nchw"
    channels: Literal["rgb", "bgr"] = "rgb"
    scale: float = 1.0 / 255.0
    """Pixel values (0..255) are multiplied by this, then ``mean`` is subtracted and the result
    divided by ``std``, per channel."""
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    dtype: Any = np.float32
    """float32, float16 or uint8 (uint8 models take raw pixels: scale/mean/std must be neutral)."""
    pad_pixel: float = 114.0
    """Value of the letterbox border, in pixel units before normalization (YOLO uses 114)."""
    center: bool = True
    """Center the picture in the letterbox (YOLO) or put it in the top-left corner."""


@dataclass(frozen=True, slots=True)
class Letterbox:
    """How a source picture sits in the tensor; maps model coordinates back to source pixels."""

    src_width: int
    src_height: int
    scale: float
    left: int
    top: int
    width: int
    """Width of the picture inside the tensor (the rest is border)."""
    height: int

    @classmethod
    def fit(cls, src_width: int, src_height: int, dst_width: int, dst_height: int, center: bool) -> Letterbox:
        scale = min(dst_width / src_width, dst_height / src_height)
        width = max(1, min(dst_width, round(src_width * scale)))
        height = max(1, min(dst_height, round(src_height * scale)))
        left = (dst_width - width) // 2 if center else 0
        top = (dst_height - height) // 2 if center else 0
        return cls(src_width, src_height, scale, left, top, width, height)

    def to_source(self, xy: np.ndarray) -> np.ndarray:
        """Points or boxes ``[..., x, y, x, y ...]`` in tensor pixels -> source pixels, in place
        (the array is also returned), clipped to the picture."""
        xy[..., 0::2] -= self.left
        xy[..., 1::2] -= self.top
        xy /= self.scale
        np.clip(xy[..., 0::2], 0, self.src_width, out=xy[..., 0::2])
        np.clip(xy[..., 1::2], 0, self.src_height, out=xy[..., 1::2])
        return xy


class Preprocessor:
    """Frame -> input tensor, reusing every buffer. Not thread-safe: one per worker."""

    def __init__(self, fmt: TensorFormat, method: Method = "auto") -> None:
        if method not in ("auto", "swscale", "numpy"):
            raise ValueError(f"method must be auto, swscale or numpy, not {method!r}")
        self.fmt = fmt
        self.method = method
        dtype = np.dtype(fmt.dtype)
        if dtype == np.uint8 and (fmt.scale != 1.0 or any(fmt.mean) or any(s != 1.0 for s in fmt.std)):
            raise ValueError("a uint8 input takes raw pixels: use scale=1, mean=0, std=1")
        shape = (1, 3, fmt.height, fmt.width) if fmt.layout == "nchw" else (1, fmt.height, fmt.width, 3)
        self._tensors = [np.empty(shape, dtype), np.empty(shape, dtype)]
        self._turn = 0
        # out = pixel * gain + offset, per output channel (RGB order here; BGR swaps the views)
        self._gain = [np.float32(fmt.scale / s) for s in fmt.std]
        self._offset = [np.float32(-m / s) for m, s in zip(fmt.mean, fmt.std, strict=True)]
        self._geometry: tuple[int, int] | None = None
        self.letterbox: Letterbox | None = None
        self._maps: _NearestMaps | None = None
        self._views: list[list[np.ndarray]] = []
        self.last_method = ""
        """The way the latest frame was converted (``swscale`` or ``numpy``)."""

    def __call__(self, frame: Frame) -> tuple[np.ndarray, Letterbox]:
        """The tensor for ``frame`` (owned by this preprocessor: valid until the call after the
        next) and the letterbox that maps model outputs back onto the frame."""
        box = self._prepare(frame.width, frame.height)
        tensor = self._tensors[self._turn]
        self._turn ^= 1
        planes = self._views[self._turn ^ 1]
        av_frame = frame.av_frame
        if self.method != "numpy" and av_frame is not None:
            self._swscale(av_frame, planes, box)
            self.last_method = "swscale"
        elif self.method == "swscale":
            raise ValueError(f"{frame!r} has no decoder frame behind it: swscale needs one (use auto)")
        else:
            self._numpy(frame, planes)
            self.last_method = "numpy"
        return tensor, box

    def _prepare(self, width: int, height: int) -> Letterbox:
        if self._geometry == (width, height) and self.letterbox is not None:
            return self.letterbox
        fmt = self.fmt
        box = Letterbox.fit(width, height, fmt.width, fmt.height, fmt.center)
        # The border never changes while the geometry stays: filled once, here.
        pad = [fmt.pad_pixel * g + o for g, o in zip(self._gain, self._offset, strict=True)]
        for tensor in self._tensors:
            for channel, view in enumerate(self._planes(tensor, None)):
                view[...] = pad[channel]
        self._views = [self._planes(tensor, box) for tensor in self._tensors]
        self._maps = _NearestMaps(width, height, box)
        self._geometry = (width, height)
        self.letterbox = box
        return box

    def _planes(self, tensor: np.ndarray, box: Letterbox | None) -> list[np.ndarray]:
        """Views of the R, G, B planes of ``tensor`` (the picture area only, if ``box``)."""
        if box is None:
            rows, cols = slice(None), slice(None)
        else:
            rows, cols = slice(box.top, box.top + box.height), slice(box.left, box.left + box.width)
        if self.fmt.layout == "nchw":
            views = [tensor[0, c, rows, cols] for c in range(3)]
        else:
            views = [tensor[0, rows, cols, c] for c in range(3)]
        return views if self.fmt.channels == "rgb" else views[::-1]

    def _affine(self, pixels: np.ndarray, out: np.ndarray, channel: int) -> None:
        gain, offset = self._gain[channel], self._offset[channel]
        if out.dtype == np.uint8:
            np.copyto(out, pixels, casting="unsafe")
            return
        np.multiply(pixels, gain, out=out)
        if offset:
            out += offset

    def _swscale(self, av_frame: Any, planes: list[np.ndarray], box: Letterbox) -> None:
        # gbrp: planar G, B, R at the picture's size in the tensor; FAST_BILINEAR filters enough
        # for detection and is the quickest swscale kernel.
        small = av_frame.reformat(
            width=box.width, height=box.height, format="gbrp", interpolation="FAST_BILINEAR"
        )
        g, b, r = (_plane_view(p, box.height, box.width) for p in small.planes)
        for channel, pixels in enumerate((r, g, b)):
            self._affine(pixels, planes[channel], channel)

    def _numpy(self, frame: Frame, planes: list[np.ndarray]) -> None:
        maps = self._maps
        assert maps is not None
        y, u, v = maps.sample(frame)
        for channel, pixels in enumerate(maps.rgb(y, u, v)):
            self._affine(pixels, planes[channel], channel)


class _NearestMaps:
    """Index maps and scratch planes for the numpy path at one geometry."""

    def __init__(self, width: int, height: int, box: Letterbox) -> None:
        h, w = box.height, box.width
        # Centre of each output pixel, mapped back: the nearest source pixel.
        self.rows = np.minimum(((np.arange(h) + 0.5) * height / h).astype(np.intp), height - 1)
        self.cols = np.minimum(((np.arange(w) + 0.5) * width / w).astype(np.intp), width - 1)
        self.crows = self.rows // 2
        self.ccols = self.cols // 2
        self.y_rows = np.empty((h, width), np.uint8)
        self.c_rows = np.empty((h, (width + 1) // 2, 2), np.uint8)
        self.c_rows1 = np.empty((h, (width + 1) // 2), np.uint8)
        self.y = np.empty((h, w), np.uint8)
        self.uv = np.empty((h, w, 2), np.uint8)
        self.u = np.empty((h, w), np.uint8)
        self.v = np.empty((h, w), np.uint8)
        self.fy = np.empty((h, w), np.float32)
        self.fu = np.empty((h, w), np.float32)
        self.fv = np.empty((h, w), np.float32)
        self.out = [np.empty((h, w), np.float32) for _ in range(3)]

    def sample(self, frame: Frame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        np.take(frame.y, self.rows, axis=0, out=self.y_rows)
        np.take(self.y_rows, self.cols, axis=1, out=self.y)
        if frame.format == NV12:
            assert frame.uv is not None
            np.take(frame.uv, self.crows, axis=0, out=self.c_rows)
            np.take(self.c_rows, self.ccols, axis=1, out=self.uv)
            return self.y, self.uv[:, :, 0], self.uv[:, :, 1]
        assert frame.u is not None
        assert frame.v is not None
        for plane, out in ((frame.u, self.u), (frame.v, self.v)):
            np.take(plane, self.crows, axis=0, out=self.c_rows1)
            np.take(self.c_rows1, self.ccols, axis=1, out=out)
        return self.y, self.u, self.v

    def rgb(self, y: np.ndarray, u: np.ndarray, v: np.ndarray) -> list[np.ndarray]:
        """BT.601 limited range to RGB 0..255 (float), into the reused planes."""
        fy, fu, fv = self.fy, self.fu, self.fv
        np.subtract(y, np.float32(16), out=fy)
        fy *= np.float32(1.164)
        np.subtract(u, np.float32(128), out=fu)
        np.subtract(v, np.float32(128), out=fv)
        r, g, b = self.out
        np.multiply(fv, np.float32(1.596), out=r)
        r += fy
        np.multiply(fu, np.float32(2.017), out=b)
        b += fy
        np.multiply(fu, np.float32(-0.392), out=g)
        g += fy
        fv *= np.float32(-0.813)
        g += fv
        for plane in self.out:
            np.clip(plane, 0, 255, out=plane)
        return self.out


def _plane_view(plane: Any, height: int, width: int) -> np.ndarray:
    flat = np.frombuffer(plane, np.uint8)
    return flat.reshape(height, plane.line_size)[:, :width]
