"""A detection model loaded and warmed up: what the detector's other steps need to know of it.

:func:`load_model` resolves the model (a registry name is fetched once if missing; a path is
used as is), loads it (:class:`~edgepipe.infer.Session`: providers, threads, deadline), reads
the image input's layout and any fixed size, and runs it once on a blank picture to pick the
output adapter (when ``auto``), the labels (when not given) and to time the first result.

A model given by path is read as the registry's when it is a copy of a registry model (its
checksum), else as its metadata says (:mod:`edgepipe.infer.metadata`: what ``edgepipe
quantize`` writes), else from its outputs. :func:`check_model_file` refuses, when the detector
is declared, a file whose input it cannot feed (a fixed batch of several images).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from edgepipe.infer import Session, SessionConfig
from edgepipe.infer.errors import ModelInputError, ModelLoadError
from edgepipe.infer.footprint import read_io
from edgepipe.infer.metadata import ADAPTER_KEY, outputs_info
from edgepipe.infer.registry import copy_of, resolve
from edgepipe.infer.spec import ONNX_ELEM_TYPES
from edgepipe.vision import adapters
from edgepipe.vision.labels import COCO80

log = logging.getLogger(__name__)

Layout = Literal["nchw", "nhwc"]

STRIDE = 32
"""The side of a model input that takes any size is a multiple of this."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A loaded, warmed-up detection model (immutable: shared by the detector's steps)."""

    session: Session
    name: str
    """The registry name, or the file name of a model given by path."""
    adapter: str
    """The output decoder: the one asked for, the registry's, or the one the first run chose."""
    labels: tuple[str, ...]
    """Class names by index (empty: labels are the class numbers)."""
    layout: Layout
    fixed_hw: tuple[int, int] | None
    """``(height, width)`` of a model that takes one size only; None when any size works."""
    dtype: Any
    """numpy dtype of the image input."""
    batchable: bool
    """The batch dimension is free: several frames can go through one run."""

    def input_hw(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """``(height, width)`` of an input tensor of this model's layout."""
        return (shape[2], shape[3]) if self.layout == "nchw" else (shape[1], shape[2])


def load_model(
    model: str,
    config: SessionConfig,
    *,
    adapter: str = "auto",
    labels: tuple[str, ...] | None = None,
    input_size: int = 640,
    owner: str = "",
) -> LoadedModel:
    """Resolve, load and warm up ``model``. Blocking (a registry model may be fetched, and the
    first run can take seconds); raises what :func:`resolve` and :class:`Session` raise.

    ``input_size`` sizes the warm-up picture of a model that takes any size (3:4 of it, rounded
    up to the stride), so that the first frames do not pay for a first run at a new size.
    """
    resolved = resolve(model)
    entry = resolved.entry
    if entry is not None and entry.free_image_dims and not config.free_image_dims:
        config = replace(config, free_image_dims=True)
    known = outputs_info(resolved, labels=labels is None)
    if adapter == "auto" and known.adapter is not None:
        if known.adapter not in adapters.ADAPTERS:
            raise ModelLoadError(f"its metadata {ADAPTER_KEY} is {known.adapter!r}, which edgepipe does "
                                 f"not decode: pass adapter= one of {', '.join(adapters.ADAPTERS)}",
                                 model=resolved.name)  # fmt: skip
        adapter = known.adapter
    if labels is None and known.labels is not None:
        labels = known.labels
    session = Session(resolved.path, config, name=resolved.name, owner=owner)
    spec = session.input(0)
    _check_batch(resolved.name, spec.name, spec.shape, spec.dtype)  # the warm-up would fail on it
    layout, fixed = _layout(spec.shape)
    dtype = spec.dtype or np.float32
    batchable = not isinstance(spec.shape[0], int)  # a free batch dimension
    height, width = fixed or (round_to_stride(input_size * 3 // 4), round_to_stride(input_size))
    blank = np.zeros(_tensor_shape(layout, height, width), dtype)
    outputs = session.run({spec.name: blank}, timeout_s=max(30.0, config.timeout_s or 0))
    if adapter == "auto":
        adapter = adapters.guess(session.output_names, [o.shape for o in outputs])
        log.info("model %s: outputs read as %s", resolved.name, adapter)
    if labels is None:
        labels = COCO80 if _class_count(adapter, outputs) == 80 else ()
    if known.said_by and resolved.by_path:  # a file read as the registry's model, or as it says
        log.info("model %s: outputs read as %s, labels %s, as %s says", resolved.name, adapter,
                 ", ".join(labels) or "by class number", known.said_by)  # fmt: skip
    return LoadedModel(session, resolved.name, adapter, labels, layout, fixed, dtype, batchable)


def read_input(file: Path, free_image_dims: bool) -> tuple[Layout, tuple[int, int] | None, Any]:
    """(layout, fixed ``(height, width)`` or None, numpy dtype) of the image input as
    :func:`load_model` would find them, read from the file without loading it (``free_image_dims``:
    as the session would make them). Raises what :func:`~edgepipe.infer.footprint.read_io` does."""
    inputs, _ = read_io(file)
    if not inputs:
        raise ModelLoadError("the model declares no input", model=str(file))
    first = inputs[0]
    dims = first.dims or ()
    if free_image_dims and len(dims) == 4:
        dims = (None, dims[1], None, None)
    layout, fixed = _layout(dims)
    return layout, fixed, ONNX_ELEM_TYPES.get(first.elem_type) or np.float32


def check_model_file(model: str, free_image_dims: bool) -> None:
    """Refuse a model file whose image input the detector cannot feed (a fixed batch of several
    images), before anything runs: :class:`ModelInputError` naming the input and what to do. A
    copy of a registry model is read as the registry's (its dims freed). A file not there yet,
    or not readable as ONNX, is left to the node's start, which loads it and says why."""
    file = Path(model).expanduser()
    if not file.is_file():
        return
    entry = copy_of(file)
    if free_image_dims or (entry is not None and entry.free_image_dims):
        return  # batch, height and width are made free as it loads
    try:
        inputs, _ = read_io(file)
    except ModelLoadError:
        return
    if inputs and inputs[0].dims:
        first = inputs[0]
        _check_batch(file.name, first.name, first.dims or (), ONNX_ELEM_TYPES.get(first.elem_type))


def _check_batch(model: str, input_name: str, shape: Sequence[int | str | None], dtype: Any) -> None:
    batch = shape[0] if len(shape) == 4 else None
    if isinstance(batch, int) and batch > 1:
        dims = ", ".join("?" if d is None else str(d) for d in shape)
        kind = f" {np.dtype(dtype).name}" if dtype is not None else ""
        raise ModelInputError(
            f"input '{input_name}' is [{dims}]{kind}, a fixed batch of {batch} images, and the detector "
            f"feeds one frame a run: export it again with the batch free (torch.onnx.export(..., "
            f"dynamic_axes={{'{input_name}': {{0: 'batch'}}}})), or, if its layers take any size, "
            "give its Detector session=SessionConfig(free_image_dims=True) in the pipeline file",
            model=model, input_name=input_name,
        )  # fmt: skip


def round_to_stride(value: float) -> int:
    """``value`` rounded up to a multiple of :data:`STRIDE` (one stride at least)."""
    return max(STRIDE, math.ceil(value / STRIDE) * STRIDE)


def _layout(shape: tuple[int | str | None, ...]) -> tuple[Layout, tuple[int, int] | None]:
    """("nchw" | "nhwc", fixed (height, width) or None) from the image input's declared shape."""
    if len(shape) != 4:
        raise ValueError(
            f"the detector's first input must be an image [N, C, H, W] or [N, H, W, C], got {list(shape)}"
        )
    layout: Layout
    if shape[1] == 3:
        layout, hw = "nchw", (shape[2], shape[3])
    elif shape[3] == 3:
        layout, hw = "nhwc", (shape[1], shape[2])
    else:
        layout, hw = "nchw", (shape[2], shape[3])
    if isinstance(hw[0], int) and isinstance(hw[1], int) and hw[0] > 0 and hw[1] > 0:
        return layout, (hw[0], hw[1])
    return layout, None


def _tensor_shape(layout: Layout, height: int, width: int) -> tuple[int, int, int, int]:
    return (1, 3, height, width) if layout == "nchw" else (1, height, width, 3)


def _class_count(adapter: str, outputs: Sequence[np.ndarray]) -> int:
    shape = outputs[0].shape
    if adapter == "yolov8" and len(shape) == 3:
        return int(shape[1]) - 4
    if adapter == "yolov5" and len(shape) == 3:
        return int(shape[2]) - 5
    return 0
