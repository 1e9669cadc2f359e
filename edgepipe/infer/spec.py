"""A model's inputs and outputs as edgepipe sees them: name, shape and numpy dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

NUMPY_TYPES: dict[str, Any] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}
"""ONNX Runtime's type names -> numpy dtypes, for the types edgepipe feeds and reads."""

ONNX_ELEM_TYPES: dict[int, Any] = {
    1: np.float32,
    10: np.float16,
    11: np.float64,
    2: np.uint8,
    3: np.int8,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
}
"""The same types by their number in an ONNX file (``TensorProto.DataType``)."""


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A model input or output as the session sees it (after any dim freeing)."""

    name: str
    shape: tuple[int | str | None, ...]
    dtype: Any
    """numpy dtype, or None for a type edgepipe does not map."""
    type: str = ""
    """ONNX Runtime's name of the type (``tensor(bfloat16)``): also for types numpy lacks."""


def spec_of(node: Any) -> TensorSpec:
    """The spec of an ONNX Runtime ``NodeArg`` (``InferenceSession.get_inputs()`` items)."""
    shape = tuple(d if isinstance(d, int | str) else None for d in (node.shape or ()))
    return TensorSpec(node.name, shape, NUMPY_TYPES.get(node.type), node.type)
