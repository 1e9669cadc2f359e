"""Frames into a detection model's input tensors: the tensor format, one reusable
:class:`~edgepipe.media.tensor.Preprocessor` per frame size, and the :class:`Prepared` frame
handed from the detector's ``prepare()`` to its ``process()``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgepipe.core.lease import Leased
from edgepipe.media.frame import Frame
from edgepipe.media.tensor import Letterbox, Method, Preprocessor, TensorFormat
from edgepipe.vision.model import LoadedModel, round_to_stride


@dataclass(frozen=True, slots=True)
class Normalize:
    """Pixel (0..255) -> model value: ``(pixel * scale - mean) / std`` per channel."""

    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    channels: str = "rgb"


_DEFAULT_NORMALIZE = {"centerface": Normalize(scale=1.0)}
_MAX_SIZES = 8


def tensor_buffers(batch_size: int, instances: int = 1) -> int:
    """Input tensors a detector uses in turn: one per call in flight (``instances``, or a batch
    of them), one waiting behind those calls while the next is filled, and one for a run
    abandoned at its deadline (:mod:`edgepipe.runtime.inflight.flight`)."""
    return max(3, batch_size + 1, instances + 2)


def input_format(
    layout: str,
    fixed_hw: tuple[int, int] | None,
    dtype: Any,
    normalize: Normalize,
    *,
    input_size: int,
    width: int,
    height: int,
) -> TensorFormat:
    """The input tensor of a model (its ``layout``, fixed ``(height, width)`` if any, ``dtype``)
    for frames of ``width`` x ``height``."""
    if fixed_hw is not None:
        in_h, in_w = fixed_hw
        center = True
    else:
        # Any size works: the frame's own shape at input_size (never enlarged: upscaling adds
        # work, not detail), padded to the stride only.
        scale = min(1.0, input_size / max(width, height))
        in_w, in_h = round_to_stride(width * scale), round_to_stride(height * scale)
        center = False
    return TensorFormat(
        in_w, in_h, layout=layout, channels=normalize.channels,  # type: ignore[arg-type]
        scale=normalize.scale, mean=normalize.mean, std=normalize.std, dtype=dtype,
        pad_pixel=114.0 if center else 0.0, center=center,
    )  # fmt: skip


class TensorCache:
    """The input tensors of one model, made by one :class:`Preprocessor` per frame size (whose
    buffers are made once and reused for every later frame of that size)."""

    def __init__(
        self,
        model: LoadedModel,
        *,
        input_size: int,
        normalize: Normalize | None = None,
        method: Method = "auto",
        batch_size: int = 1,
        instances: int = 1,
        owner: str = "detector",
        gauges: dict[str, Any] | None = None,
    ) -> None:
        """
        input_size: longest side of the input for a model that takes any size (never enlarged,
            rounded up to the stride); a fixed-size model uses its own.
        normalize: pixel scaling (default: the adapter's, else 0..1 RGB); a uint8 model takes
            raw pixels whatever is given, in the given channel order.
        batch_size: the most tensors of one size a batched run reads at once.
        instances: the model's calls in flight at once, each reading one tensor.
        owner: the name the tensors' memory is reserved under (the node).
        gauges: where the current input size is shown (``input``).
        """
        self.model = model
        self.input_size = input_size
        self.method: Method = method
        self.owner = owner
        self._gauges = gauges if gauges is not None else {}
        norm = normalize or _DEFAULT_NORMALIZE.get(model.adapter, Normalize())
        if np.dtype(model.dtype) == np.uint8:
            norm = Normalize(scale=1.0, channels=norm.channels)
        self.normalize = norm
        self.buffers = tensor_buffers(batch_size, instances)
        self._preprocessors: dict[tuple[int, int], Preprocessor] = {}
        self._newest: TensorFormat | None = None

    @property
    def input_format(self) -> TensorFormat | None:
        """The format of the newest input size (None before the first frame)."""
        return self._newest

    def __call__(self, frame: Frame) -> tuple[np.ndarray, Letterbox]:
        """The frame's input tensor (one of the preprocessor's buffers, reused in turn) and how
        the picture sits in it."""
        return self.preprocessor(frame.width, frame.height)(frame)

    def preprocessor(self, width: int, height: int) -> Preprocessor:
        """The preprocessor for frames of ``width`` x ``height``, made on first use."""
        pre = self._preprocessors.get((width, height))
        if pre is not None:
            return pre
        model = self.model
        fmt = input_format(model.layout, model.fixed_hw, model.dtype, self.normalize,
                           input_size=self.input_size, width=width, height=height)  # fmt: skip
        pre = Preprocessor(fmt, self.method, buffers=self.buffers, owner=self.owner)
        if len(self._preprocessors) > _MAX_SIZES:  # a source that keeps changing size must not grow memory
            self._preprocessors.clear()
        self._preprocessors[(width, height)] = pre
        self._newest = fmt
        self._gauges["input"] = f"{fmt.width}x{fmt.height}"
        return pre


class Prepared(Leased):
    """A frame made ready for the model: its input tensor and letterbox (None on frames the
    tracker fills in), and once the model ran (the detector's ``process()``), what it found.
    Holds a lease on the frame until it is released."""

    __slots__ = ("found", "frame", "infer_ms", "letterbox", "tensor", "took_s")

    def __init__(self, frame: Frame, tensor: np.ndarray | None, letterbox: Letterbox | None) -> None:
        super().__init__()
        frame.retain()
        self.frame = frame
        self.tensor = tensor
        self.letterbox = letterbox
        self.found: list[Any] | None = None
        """The model's detections in source pixels (before tracking); None until it ran."""
        self.infer_ms: float | None = None
        """The model run's own wall time (not its wait for the CPU budget)."""
        self.took_s = 0.0
        """The whole ``process()`` call's wall time: the run, its wait for the budget, the
        decoding of its outputs (what keeping up divides among the calls in flight)."""

    @property
    def light(self) -> bool:
        """No model run for this frame (the tracker carries its boxes): quick to process."""
        return self.tensor is None

    def _free(self) -> None:
        self.frame.release()
