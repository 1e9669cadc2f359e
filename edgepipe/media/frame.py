"""Video frames in the decoder's own layout (NV12 or I420), leased from a bounded pool.

A :class:`Frame` is a view, not a copy: its planes are numpy arrays over the decoder's output
buffers (a PyAV frame kept alive by the Frame) or over a buffer of the pool (synthetic video).
The pool bounds how many frames of one source exist at once; when the last holder releases a
frame (see :mod:`edgepipe.core.lease`), its slot and buffers go back to the pool.

Hardware decoders give NV12 (Y plane + interleaved UV plane); software decoders give I420 (Y, U,
V planes). Both are kept as they come: converting only to change layout would copy every frame.
Code that reads chroma handles both (``frame.uv`` or ``frame.u``/``frame.v``).
"""

from __future__ import annotations

import threading
import time
import weakref
from fractions import Fraction
from typing import Any, ClassVar, NamedTuple

import numpy as np

from edgepipe.core.lease import Leased
from edgepipe.media.colour import AVCOL_RANGE_JPEG, Matrix, YCbCr, guess_matrix, matrix_of, ycbcr
from edgepipe.planning.memory import Reservation, memory_plan

NV12 = "nv12"
I420 = "i420"


class FrameSize(NamedTuple):
    """The picture size of a source's frames (what a source's ``plan_memory`` says it produces)."""

    width: int
    height: int


def frame_pool_size(capacity: int, width: int, height: int) -> tuple[str, int]:
    """What a pool of ``capacity`` 4:2:0 frames of this size is called in the memory plan, and
    its bytes (a decoder's other formats are converted to NV12, which is 4:2:0 too)."""
    return f"frame pool ({capacity} x {width}x{height})", capacity * width * height * 3 // 2


def _release_all(reservations: list[Reservation]) -> None:
    while reservations:
        reservations.pop().release()


class FramePool:
    """At most ``capacity`` frames of one source exist at once. Thread-safe.

    The decode thread takes a slot before it hands a frame out; releasing the frame (from any
    thread) gives the slot back. ``buffers`` optionally pre-allocates a planar buffer per slot,
    for sources that make their own pixels (double buffering: the producer fills one slot while
    consumers read another).
    """

    def __init__(self, capacity: int, name: str = "frames") -> None:
        if capacity < 1:
            raise ValueError(f"frame pool '{name}': capacity must be at least 1")
        self.capacity = capacity
        self.name = name
        self._free = list(range(capacity))
        self._cond = threading.Condition()
        self._buffers: list[np.ndarray | None] = [None] * capacity
        self.exhausted = 0
        """Times a frame could not be had at once (live sources drop the frame then)."""
        self._planned: tuple[int, int] = (0, 0)
        self._reservation: list[Reservation] = []  # the current one; a list the finalizer can see
        weakref.finalize(self, _release_all, self._reservation)  # one per pool, not per size

    def plan(self, width: int, height: int) -> None:
        """Count ``capacity`` 4:2:0 frames of this size in the memory plan (when the size changes;
        the decoder allocates them, the pool bounds how many exist). Raises
        :class:`~edgepipe.planning.memory.MemoryBudgetError`."""
        if (width, height) == self._planned:
            return
        _release_all(self._reservation)
        self._planned = (0, 0)  # if the new size is refused, the next frame asks again
        what, nbytes = frame_pool_size(self.capacity, width, height)
        self._reservation.append(memory_plan().reserve(self.name, what, nbytes))
        self._planned = (width, height)

    @property
    def in_use(self) -> int:
        return self.capacity - len(self._free)

    def try_acquire(self) -> int | None:
        """A free slot, or None at once if every frame is held."""
        with self._cond:
            if self._free:
                return self._free.pop()
            self.exhausted += 1
            return None

    def acquire(self, timeout_s: float | None = None) -> int | None:
        """Wait for a free slot (None if ``timeout_s`` passed first)."""
        with self._cond:
            if not self._free:
                self.exhausted += 1
                if not self._cond.wait_for(lambda: bool(self._free), timeout=timeout_s):
                    return None
            return self._free.pop()

    def give_back(self, slot: int) -> None:
        with self._cond:
            self._free.append(slot)
            self._cond.notify()

    def buffer(self, slot: int, nbytes: int) -> np.ndarray:
        """The slot's own byte buffer, (re)allocated only when the size changes."""
        buf = self._buffers[slot]
        if buf is None or buf.nbytes != nbytes:
            buf = self._buffers[slot] = np.empty(nbytes, np.uint8)
        return buf


class Frame(Leased):
    """One decoded picture. Planes are read-only views unless the frame says ``writable``."""

    result: ClassVar[bool] = False  # a picture, not a result: --results writes no line for it
    perishable: ClassVar[bool] = True
    """Worth only while new: lanes from a live source's frames keep the newest one by default
    (:func:`edgepipe.graph.types.perishable`)."""
    __slots__ = (
        "_holder",
        "_pool",
        "_slot",
        "format",
        "full_range",
        "height",
        "matrix",
        "pts",
        "seq",
        "source_id",
        "t_decoded_ns",
        "time_base",
        "u",
        "uv",
        "v",
        "width",
        "y",
    )

    def __init__(
        self,
        *,
        format: str,
        y: np.ndarray,
        uv: np.ndarray | None = None,
        u: np.ndarray | None = None,
        v: np.ndarray | None = None,
        pts: int | None = None,
        time_base: Fraction | None = None,
        source_id: str = "",
        seq: int = 0,
        t_decoded_ns: int | None = None,
        pool: FramePool | None = None,
        slot: int = -1,
        holder: Any = None,
        full_range: bool = False,
        matrix: Matrix | None = None,
    ) -> None:
        super().__init__()
        self.format = format
        self.y = y
        self.uv = uv
        self.u = u
        self.v = v
        self.height, self.width = y.shape
        self.pts = pts
        self.time_base = time_base
        self.source_id = source_id
        self.seq = seq
        self.t_decoded_ns = time.monotonic_ns() if t_decoded_ns is None else t_decoded_ns
        """When the frame left the decoder (``time.monotonic_ns``): frame age and latency are
        measured from here."""
        self._pool = pool
        self._slot = slot
        self._holder = holder  # keeps the decoder's buffers alive while the views exist
        self.full_range = full_range
        """Luma 0..255 (JPEG, MJPEG webcams, some IP cameras) rather than video's 16..235."""
        self.matrix: Matrix = matrix or guess_matrix(self.width, self.height)
        """The YCbCr matrix, ``bt601`` or ``bt709``: the stream's tag, else guessed by size
        (:func:`~edgepipe.media.colour.guess_matrix`: HD is BT.709)."""

    @property
    def ycbcr(self) -> YCbCr:
        """The factors that turn this frame's YUV into RGB (its matrix in its range)."""
        return ycbcr(self.matrix, self.full_range)

    @property
    def time_s(self) -> float | None:
        """Presentation time in seconds, if the stream has timestamps."""
        if self.pts is None or self.time_base is None:
            return None
        return float(self.pts * self.time_base)

    @property
    def av_frame(self) -> Any:
        """The decoder's frame (a PyAV ``VideoFrame``) whose buffers the planes view, or None
        (synthetic video, copies). For FFmpeg-side processing such as swscale; read-only."""
        holder = self._holder
        return holder if holder is not None and hasattr(holder, "reformat") else None

    def chroma(self) -> tuple[np.ndarray, np.ndarray]:
        """(U, V) planes at half resolution, as views (strided for NV12)."""
        if self.format == NV12:
            assert self.uv is not None
            return self.uv[:, :, 0], self.uv[:, :, 1]
        assert self.u is not None
        assert self.v is not None
        return self.u, self.v

    def to_rgb(self) -> np.ndarray:
        """An RGB copy (the frame's own matrix and range), for debugging and tests; not for the
        hot path."""
        u, v = self.chroma()
        k = self.ycbcr
        yy = self.y.astype(np.float32) - np.float32(k.y_black)
        uu = (
            np.repeat(np.repeat(u, 2, axis=0), 2, axis=1)[: self.height, : self.width].astype(np.float32)
            - 128
        )
        vv = (
            np.repeat(np.repeat(v, 2, axis=0), 2, axis=1)[: self.height, : self.width].astype(np.float32)
            - 128
        )
        r = k.y * yy + k.rv * vv
        g = k.y * yy + k.gu * uu + k.gv * vv
        b = k.y * yy + k.bu * uu
        rgb: np.ndarray = np.clip(np.stack([r, g, b], axis=-1) + 0.5, 0, 255).astype(np.uint8)
        return rgb

    def to_dict(self) -> dict[str, Any]:
        """What a result line says about a frame: its identity, never its pixels."""
        return {
            "source": self.source_id,
            "seq": self.seq,
            "pts": self.pts,
            "time_s": self.time_s,
            "width": self.width,
            "height": self.height,
            "format": self.format,
        }

    def _free(self) -> None:
        self._holder = None
        if self._pool is not None:
            self._pool.give_back(self._slot)
            self._pool = None

    def __repr__(self) -> str:
        return f"Frame({self.source_id}#{self.seq} {self.width}x{self.height} {self.format} pts={self.pts})"


def plane_view(av_plane: Any, height: int, width: int) -> np.ndarray:
    """A read-only ``(height, width)`` uint8 view of a PyAV plane (a decoder's or swscale's)."""
    # The plane's rows are line_size bytes apart (padding for SIMD): a strided view, no copy.
    # Read-only: the decoder may still use these pixels as a reference for the next frames.
    flat = np.frombuffer(av_plane, np.uint8)
    view = flat.reshape(height, av_plane.line_size)[:, :width]
    view.flags.writeable = False
    return view


def from_av(
    av_frame: Any, *, source_id: str, seq: int, pool: FramePool | None = None, slot: int = -1
) -> Frame:
    """Wrap a decoded ``av.VideoFrame`` (yuv420p/yuvj420p or nv12) without copying its pixels.

    Its colour tags say how to read it: ``colorspace`` the matrix (untagged: by size),
    ``color_range`` the range (untagged: limited, as FFmpeg reads it, except the JPEG formats).
    """
    w, h = av_frame.width, av_frame.height
    cw, ch = (w + 1) // 2, (h + 1) // 2
    fmt = av_frame.format.name
    planes = av_frame.planes
    full_range = fmt == "yuvj420p" or av_frame.color_range == AVCOL_RANGE_JPEG
    common: dict[str, Any] = {"pts": av_frame.pts, "time_base": av_frame.time_base, "source_id": source_id,
                              "seq": seq, "pool": pool, "slot": slot, "holder": av_frame,
                              "full_range": full_range,
                              "matrix": matrix_of(av_frame.colorspace, w, h)}  # fmt: skip
    if fmt in ("yuv420p", "yuvj420p"):
        u, v = plane_view(planes[1], ch, cw), plane_view(planes[2], ch, cw)
        return Frame(format=I420, y=plane_view(planes[0], h, w), u=u, v=v, **common)
    if fmt == "nv12":
        uv = plane_view(planes[1], ch, cw * 2).reshape(ch, cw, 2)
        return Frame(format=NV12, y=plane_view(planes[0], h, w), uv=uv, **common)
    raise ValueError(f"pixel format {fmt} is neither I420 nor NV12; convert it first")


def from_planes(
    y: np.ndarray,
    uv: np.ndarray,
    *,
    source_id: str = "",
    seq: int = 0,
    pts: int | None = None,
    time_base: Fraction | None = None,
    pool: FramePool | None = None,
    slot: int = -1,
    matrix: Matrix | None = None,
    full_range: bool = False,
) -> Frame:
    """An NV12 frame over existing arrays: ``y`` (H, W) and ``uv`` (H/2, W/2, 2), in ``matrix``
    (None: guessed by size) and range."""
    return Frame(format=NV12, y=y, uv=uv, pts=pts, time_base=time_base, source_id=source_id, seq=seq,
                 pool=pool, slot=slot, matrix=matrix, full_range=full_range)  # fmt: skip


def nv12_views(buf: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Y and interleaved UV views over one contiguous NV12 buffer of ``width*height*3/2`` bytes."""
    ysize = width * height
    y = buf[:ysize].reshape(height, width)
    uv = buf[ysize : ysize + ysize // 2].reshape(height // 2, width // 2, 2)
    return y, uv


def from_rgb(
    rgb: np.ndarray,
    *,
    source_id: str = "image",
    seq: int = 0,
    matrix: Matrix = "bt601",
    full_range: bool = False,
) -> Frame:
    """An NV12 frame made from an RGB image, in ``matrix`` and range (default BT.601 limited,
    what a still's JPEG YCbCr is closest to in video), for stills and tests.

    Copies and converts: not for the video path. Odd widths/heights lose their last column/row
    (4:2:0 chroma covers pixel pairs).
    """
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an RGB image (H, W, 3), got shape {rgb.shape}")
    h, w = rgb.shape[0] & ~1, rgb.shape[1] & ~1
    img = rgb[:h, :w].astype(np.float32)
    k = ycbcr(matrix, full_range)
    buf = np.empty(w * h * 3 // 2, np.uint8)
    y, uv = nv12_views(buf, w, h)
    luma = k.to_yuv(img[..., 0], img[..., 1], img[..., 2])[0]
    y[...] = np.clip(luma + 0.5, 0, 255)
    # Chroma from the mean of each 2x2 block.
    r2, g2, b2 = (img[..., c].reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3)) for c in range(3))
    _, u, v = k.to_yuv(r2, g2, b2)
    uv[..., 0] = np.clip(u + 0.5, 0, 255)
    uv[..., 1] = np.clip(v + 0.5, 0, 255)
    return from_planes(y, uv, source_id=source_id, seq=seq, matrix=matrix, full_range=full_range)
