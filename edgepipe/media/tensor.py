"""NV12/I420 frames into a model's input tensor: letterbox, colour conversion, normalization.

No full-resolution RGB image is ever made. Two ways:

- ``numpy`` (the default, ``method="auto"``): each output pixel takes its nearest source
  pixel from the Y plane, chroma is read at half the output height, and the colour conversion
  (the frame's own matrix and range: BT.601 or BT.709, limited or full; precomputed factors)
  and the normalization run at the output size only, written straight into the tensor. Integer
  scale ratios (1080p -> 640 is 3) are strided views of the planes: nothing is gathered.
- ``swscale``: FFmpeg's swscale scales the decoder's own frame (kept by the :class:`Frame`)
  with a bilinear filter and converts it to planar RGB at the output size in one pass (told the
  frame's matrix and range, so both ways read a frame alike); numpy writes the three planes
  into the tensor. Filtered, so less aliasing on large downscales; it needs a decoder frame
  behind the :class:`Frame` (not synthetic video, not copies).

``scripts/bench/detect.py`` measures both, an ONNX preprocessing graph, and OpenCV's
``cvtColor`` + ``resize``: numpy was the fastest on the machines measured so far, so ``auto``
uses it for every frame (one code path, the same tensor for the same picture whatever its
source); swscale is there for those who want filtering.

Buffers (the tensors, the index maps, the float scratch planes) are made when the geometry
changes and reused for every later frame. Output tensors are used in turn, so a run that still
reads one (abandoned at a deadline) is never overwritten by the next frame; a caller that
prepares one frame while the model runs on another asks for more (``buffers``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from edgepipe.media.colour import AVCOL_RANGE_JPEG, AVCOL_RANGE_MPEG, SWS_CS_OF, YCbCr
from edgepipe.media.frame import NV12, Frame, plane_view
from edgepipe.planning.memory import memory_plan

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
    """How a source picture sits in the tensor; maps model coordinates back to source pixels.

    Each axis has its own scale: the picture's width and height in the tensor are rounded
    separately (to even pixels), so ``width / src_width`` and ``height / src_height`` differ a
    little, and the picture's far edges map back onto the source's only with each its own.
    """

    src_width: int
    src_height: int
    scale: float
    """The fit's scale (the smaller of the two ratios), before rounding."""
    left: int
    top: int
    width: int
    """Width of the picture inside the tensor (the rest is border)."""
    height: int

    @property
    def scale_x(self) -> float:
        """Tensor pixels per source pixel across (the picture's rounded width over the source's)."""
        return self.width / self.src_width

    @property
    def scale_y(self) -> float:
        """Tensor pixels per source pixel down."""
        return self.height / self.src_height

    @classmethod
    def fit(cls, src_width: int, src_height: int, dst_width: int, dst_height: int, center: bool) -> Letterbox:
        scale = min(dst_width / src_width, dst_height / src_height)
        # Even, so that each chroma sample covers whole 2x2 blocks (a pixel of border at most).
        width = max(2, min(dst_width, round(src_width * scale)) // 2 * 2)
        height = max(2, min(dst_height, round(src_height * scale)) // 2 * 2)
        left = (dst_width - width) // 2 if center else 0
        top = (dst_height - height) // 2 if center else 0
        return cls(src_width, src_height, scale, left, top, width, height)

    def to_source(self, xy: np.ndarray) -> np.ndarray:
        """Points or boxes ``[..., x, y, x, y ...]`` in tensor pixels -> source pixels, in place
        (the array is also returned), clipped to the picture."""
        xs, ys = xy[..., 0::2], xy[..., 1::2]
        xs -= self.left
        xs /= self.scale_x
        ys -= self.top
        ys /= self.scale_y
        np.clip(xs, 0, self.src_width, out=xs)
        np.clip(ys, 0, self.src_height, out=ys)
        return xy


def tensor_shape(fmt: TensorFormat) -> tuple[int, int, int, int]:
    """The shape of one input tensor of ``fmt`` (a batch of one)."""
    return (1, 3, fmt.height, fmt.width) if fmt.layout == "nchw" else (1, fmt.height, fmt.width, 3)


def tensors_size(fmt: TensorFormat, buffers: int) -> tuple[str, int]:
    """What ``buffers`` input tensors of ``fmt`` are called in the memory plan, and their bytes."""
    dtype = np.dtype(fmt.dtype)
    nbytes = buffers * int(np.prod(tensor_shape(fmt))) * dtype.itemsize
    return f"input tensors ({buffers} x {fmt.width}x{fmt.height} {dtype.name})", nbytes


class Preprocessor:
    """Frame -> input tensor, reusing every buffer. Not thread-safe: one per worker."""

    def __init__(
        self, fmt: TensorFormat, method: Method = "auto", buffers: int = 2, owner: str = "tensors"
    ) -> None:
        """``owner`` names who holds the tensors in the memory plan (a node id)."""
        if method not in ("auto", "swscale", "numpy"):
            raise ValueError(f"method must be auto, swscale or numpy, not {method!r}")
        self.fmt = fmt
        self.method = method
        dtype = np.dtype(fmt.dtype)
        if dtype == np.uint8 and (fmt.scale != 1.0 or any(fmt.mean) or any(s != 1.0 for s in fmt.std)):
            raise ValueError("a uint8 input takes raw pixels: use scale=1, mean=0, std=1")
        shape = tensor_shape(fmt)
        if buffers < 1:
            raise ValueError("buffers must be at least 1")
        what, nbytes = tensors_size(fmt, buffers)
        memory_plan().reserve(owner, what, nbytes, holder=self)
        self._tensors = [np.empty(shape, dtype) for _ in range(buffers)]
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
        """The tensor for ``frame`` (owned by this preprocessor, and reused: valid for the next
        ``buffers - 1`` calls) and the letterbox that maps model outputs back onto the frame."""
        box = self._prepare(frame.width, frame.height)
        turn = self._turn
        self._turn = (turn + 1) % len(self._tensors)
        tensor = self._tensors[turn]
        planes = self._views[turn]
        av_frame = frame.av_frame
        if self.method == "swscale":
            if av_frame is None:
                raise ValueError(f"{frame!r} has no decoder frame behind it: swscale needs one (use auto)")
            self._swscale(frame, av_frame, planes, box)
            self.last_method = "swscale"
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

    def _swscale(self, frame: Frame, av_frame: Any, planes: list[np.ndarray], box: Letterbox) -> None:
        # gbrp: planar G, B, R at the picture's size in the tensor; FAST_BILINEAR filters enough
        # for detection and is the quickest swscale kernel. The frame's matrix and range are
        # given: swscale's own default for an untagged frame is BT.601 whatever its size.
        small = av_frame.reformat(
            width=box.width, height=box.height, format="gbrp", interpolation="FAST_BILINEAR",
            src_colorspace=SWS_CS_OF[frame.matrix],
            src_color_range=AVCOL_RANGE_JPEG if frame.full_range else AVCOL_RANGE_MPEG,
            dst_color_range=AVCOL_RANGE_JPEG,
        )  # fmt: skip
        g, b, r = (plane_view(p, box.height, box.width) for p in small.planes)
        for channel, pixels in enumerate((r, g, b)):
            self._affine(pixels, planes[channel], channel)

    def _numpy(self, frame: Frame, planes: list[np.ndarray]) -> None:
        maps = self._maps
        assert maps is not None
        y, u, v = maps.sample(frame)
        if planes[0].dtype == np.float32:
            maps.convert(y, u, v, planes, self._gain, self._offset, frame.ycbcr)
            return
        maps.convert(y, u, v, maps.scratch, self._gain, self._offset, frame.ycbcr)
        for pixels, out in zip(maps.scratch, planes, strict=True):
            np.copyto(out, pixels, casting="unsafe")


Index = slice | np.ndarray


def _nearest(src: int, dst: int, count: int, limit: int, halve: bool = False) -> Index:
    """Source index of each of ``count`` output samples (output pixel centres mapped back, at a
    ``src``/``dst`` ratio; ``halve``: then into a half-size chroma plane), as a slice when
    evenly spaced (integer ratios: a view, no gather)."""
    idx = ((np.arange(count) + 0.5) * src / dst).astype(np.intp)
    if halve:
        idx //= 2
    idx = np.minimum(idx, limit - 1)
    if count > 1:
        step = int(idx[1] - idx[0])
        if step > 0 and np.all(np.diff(idx) == step):
            return slice(int(idx[0]), int(idx[-1]) + 1, step)
    return idx


class _NearestMaps:
    """Sampling indices and scratch buffers for the numpy path at one geometry.

    Luma is sampled at the output size, chroma at half its height (4:2:0 carries no more) and
    full width, and each chroma row is added to the two output rows it covers by broadcasting
    (the inner loop stays a whole row long). Constants and the normalization are folded into
    the chroma terms, so the full-size work is one multiply, then one add and one clip per
    channel, written straight into the tensor.
    """

    def __init__(self, width: int, height: int, box: Letterbox) -> None:
        h, w = box.height, box.width
        ch, cw = (height + 1) // 2, (width + 1) // 2
        self.shape = (h, w)
        self.rows = _nearest(height, h, h, height)
        self.cols = _nearest(width, w, w, width)
        self.crows = _nearest(height, h, h // 2, ch)
        self.ccols = _nearest(width, w, w, cw, halve=True)
        self._y_rows = np.empty((h, width), np.uint8)
        self._y = np.empty((h, w), np.uint8)
        self._c_rows = np.empty((h // 2, cw, 2), np.uint8)
        self._c_rows1 = np.empty((h // 2, cw), np.uint8)
        self._uv = np.empty((h // 2, w, 2), np.uint8)
        self._u = np.empty((h // 2, w), np.uint8)
        self._v = np.empty((h // 2, w), np.uint8)
        self._fy = np.empty((h, w), np.float32)
        self._fu = np.empty((h // 2, w), np.float32)
        self._fv = np.empty((h // 2, w), np.float32)
        self._tmp = np.empty((h // 2, w), np.float32)
        self._terms = [np.empty((h // 2, w), np.float32) for _ in range(3)]
        self.scratch = [np.empty((h, w), np.float32) for _ in range(3)]
        """Float planes for outputs that are not float32 (converted after)."""

    def sample(self, frame: Frame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Y at the output size, U and V at half its height: views where the ratio allows."""
        y = _pick(frame.y, self.rows, self.cols, self._y_rows, self._y)
        if frame.format == NV12:
            assert frame.uv is not None
            uv = _pick(frame.uv, self.crows, self.ccols, self._c_rows, self._uv)
            return y, uv[:, :, 0], uv[:, :, 1]
        assert frame.u is not None
        assert frame.v is not None
        u = _pick(frame.u, self.crows, self.ccols, self._c_rows1, self._u)
        v = _pick(frame.v, self.crows, self.ccols, self._c_rows1, self._v)
        return y, u, v

    def convert(
        self,
        y: np.ndarray,
        u: np.ndarray,
        v: np.ndarray,
        outs: list[np.ndarray],
        gains: list[np.float32],
        offsets: list[np.float32],
        k: YCbCr,
    ) -> None:
        """YCbCr (``k``: one of the precomputed matrix and range sets) -> RGB, normalized:
        ``out[c] = clip(rgb) * gains[c] + offsets[c]``."""
        h, w = self.shape
        fu, fv = self._fu, self._fv
        np.subtract(u, np.float32(128), out=fu)
        np.subtract(v, np.float32(128), out=fv)
        r_term, g_term, b_term = self._terms
        np.multiply(fv, k.rv, out=r_term)
        np.multiply(fu, k.gu, out=g_term)
        np.multiply(fv, k.gv, out=self._tmp)
        g_term += self._tmp
        np.multiply(fu, k.bu, out=b_term)
        y_gain = k.y
        y_offset = np.float32(-k.y_black * k.y)
        shared = len(set(gains)) == 1
        fy = self._fy
        np.multiply(y, y_gain * gains[0] if shared else y_gain, out=fy)
        for term, out, gain, offset in zip(self._terms, outs, gains, offsets, strict=True):
            # The chroma term of each pair of rows, with every constant folded in (half size).
            scale = gain if shared else np.float32(1)
            term += y_offset
            term *= scale
            if shared:
                term += offset
            row_pairs = out.reshape(h // 2, 2, w)
            np.add(fy.reshape(h // 2, 2, w), term[:, None, :], out=row_pairs)
            if shared:
                np.clip(out, offset, np.float32(255) * gain + offset, out=out)
            else:
                np.clip(out, 0, 255, out=out)
                out *= gain
                out += offset


def _pick(plane: np.ndarray, rows: Index, cols: Index, row_buf: np.ndarray, out: np.ndarray) -> np.ndarray:
    if isinstance(rows, slice) and isinstance(cols, slice):
        return plane[rows, cols]
    picked_rows = plane[rows] if isinstance(rows, slice) else np.take(plane, rows, axis=0, out=row_buf)
    if isinstance(cols, slice):
        return picked_rows[:, cols]
    np.take(picked_rows, cols, axis=1, out=out)
    return out
