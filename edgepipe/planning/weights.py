"""A model's weights counted as stored: parameters and bytes by dtype, the one estimate that
``edgepipe plan``, ``edgepipe run --plan`` and ``edgepipe bench lm``'s roofline share.

Counted from the graph's initializers (their element type and dims, read from the file without
loading it: :func:`edgepipe.infer.footprint.read_weights`):

- each element costs its type's size: float32 4 bytes, float16 and bfloat16 2, int8 and uint8
  1, packed int4 half a byte;
- a ``MatMulNBits`` weight (ONNX Runtime's 4- and 8-bit MatMul) is stored as uint8 bytes each
  holding ``8 / bits`` weights: its bytes count as stored, under ``int4`` (or ``int8``), and its
  parameters are the weights they hold; its scales and zero points count as the bytes they take
  (they are read with it; packed zero points under the weights' dtype), not as parameters;
- an initializer only ever gathered from (an embedding table) is a table: one decode step reads
  one row of it (:attr:`Weights.per_token_bytes`), not the whole;
- the parameters are counted per dtype too, and the model's dtype is the one holding most of
  them: ``int4`` for a decoder whose MatMuls are packed, though its float32 embedding (kept so
  by ``edgepipe quantize``) may hold more of the bytes.

Weights a graph keeps elsewhere than in initializers (``Constant`` nodes) are not counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

DTYPES: dict[int, tuple[str, float]] = {
    1: ("fp32", 4),
    10: ("fp16", 2),
    16: ("bf16", 2),
    11: ("fp64", 8),
    2: ("int8", 1),
    3: ("int8", 1),
    5: ("int16", 2),
    4: ("int16", 2),
    6: ("int32", 4),
    12: ("int32", 4),
    7: ("int64", 8),
    13: ("int64", 8),
    9: ("bool", 1),
    21: ("int4", 0.5),
    22: ("int4", 0.5),
}
"""ONNX ``TensorProto.DataType`` -> (the planner's name, bytes per element)."""
PACKED_OPS = {("com.microsoft", "MatMulNBits")}
"""Operators whose input 1 is a packed weight (uint8 bytes of ``bits``-wide weights), input 2 its
scales and input 3 its zero points."""

Initializer = tuple[str, int, tuple[int, ...]]
"""``(name, data_type, dims)`` of one initializer."""


class Node(Protocol):
    """What is read of a graph node (:class:`edgepipe.infer.onnxfile.NodeInfo` is one)."""

    @property
    def domain(self) -> str: ...
    @property
    def op_type(self) -> str: ...
    @property
    def inputs(self) -> tuple[str, ...]: ...
    @property
    def ints(self) -> tuple[tuple[str, int], ...]: ...


@dataclass(frozen=True)
class Weights:
    """A model's weights as stored."""

    params: int
    """Weights, packed ones counted one by one; scales and zero points are not."""
    bytes_by_dtype: Mapping[str, float]
    """Bytes held in each dtype (``fp32``, ``fp16``, ``int4`` ...)."""
    table_bytes: int = 0
    """Bytes of the tables only ever gathered from (embeddings)."""
    table_row_bytes: int = 0
    """Bytes of one row of each of those tables."""
    params_by_dtype: Mapping[str, int] = field(default_factory=dict)
    """Parameters held in each dtype (packed ones under ``int4``/``int8``, one by one)."""
    packed_params: int = 0
    """Parameters packed for ``MatMulNBits`` (under their ``int4``/``int8`` in :attr:`params_by_dtype`)."""

    @property
    def nbytes(self) -> int:
        """All the weights' bytes: what a loaded model holds."""
        return int(sum(self.bytes_by_dtype.values()))

    @property
    def dtype(self) -> str:
        """The dtype holding most of the parameters: what the model's matrices are stored in
        (``int4`` for a quantized decoder whose float32 embedding holds more bytes than its
        packed matrices); by bytes where parameters were not counted; ``fp32`` without weights."""
        by: Mapping[str, float] = self.params_by_dtype or self.bytes_by_dtype
        return max(by, key=lambda k: by[k]) if by else "fp32"

    def formats(self) -> list[tuple[str, int]]:
        """``(dtype, parameters)`` for each dtype holding any, most parameters first."""
        return sorted(((k, v) for k, v in self.params_by_dtype.items() if v), key=lambda kv: -kv[1])

    @property
    def per_token_bytes(self) -> int:
        """What one decode step reads (batch size 1): every weight once, one row of each table."""
        return self.nbytes - self.table_bytes + self.table_row_bytes


def count(initializers: Iterable[Initializer], nodes: Sequence[Node] = ()) -> Weights:
    """The :class:`Weights` of a graph's ``initializers``, its ``nodes`` saying which are packed
    and which are tables (see the module docstring)."""
    packed: dict[str, int] = {}  # a packed weight's name -> its bits
    metadata: set[str] = set()  # scales and zero points
    zero_points: dict[str, int] = {}  # packed as the weights are
    gathered: set[str] = set()
    used_otherwise: set[str] = set()
    for node in nodes:
        if (node.domain, node.op_type) in PACKED_OPS and len(node.inputs) > 1:
            bits = dict(node.ints).get("bits", 4)
            bits = bits if bits in (2, 4, 8) else 4
            packed[node.inputs[1]] = bits
            metadata.update(node.inputs[2:4])
            if len(node.inputs) > 3:
                zero_points[node.inputs[3]] = bits
        if node.op_type == "Gather" and node.domain == "" and node.inputs:
            gathered.add(node.inputs[0])
            used_otherwise.update(node.inputs[1:])
        else:
            used_otherwise.update(node.inputs)
    params = packed_params = 0
    by_dtype: dict[str, float] = {}
    params_by: dict[str, int] = {}
    table_bytes = table_row_bytes = 0
    for name, data_type, dims in initializers:
        elements = math.prod(dims)
        dtype, size = DTYPES.get(data_type, (f"type {data_type}", 4))
        if name in packed:
            bits = packed[name]
            dtype, size = f"int{bits}", 1  # bytes as stored; each holds 8 / bits weights
            params += elements * 8 // bits
            packed_params += elements * 8 // bits
            params_by[dtype] = params_by.get(dtype, 0) + elements * 8 // bits
        elif name in zero_points and data_type == 2:  # uint8 bytes, packed as the weights are
            dtype, size = f"int{zero_points[name]}", 1
        elif name not in metadata:
            params += elements
            params_by[dtype] = params_by.get(dtype, 0) + elements
        nbytes = elements * size
        by_dtype[dtype] = by_dtype.get(dtype, 0.0) + nbytes
        if name in gathered and name not in used_otherwise and dims:
            table_bytes += int(nbytes)
            table_row_bytes += int(nbytes // max(1, dims[0]))
    return Weights(params, by_dtype, table_bytes, table_row_bytes, params_by, packed_params)


__all__ = ["DTYPES", "Weights", "count"]
