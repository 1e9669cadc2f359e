"""The sums before choosing hardware for a language model (``edgepipe plan``).

Decoding one token reads every weight once: ``bytes per token = parameters x bytes per
weight``, so ``bandwidth needed = bytes per token x tokens/s`` (3e9 x 2 bytes x 20/s = 120
GB/s). It also does about two operations (a multiply and an add) per weight: ``2 x parameters
x tokens/s``. Whichever of the two is the larger share of what the device has binds first; on
every edge device in the table that is the bandwidth (prefill, many tokens per weight read,
is the part that is compute-bound).

The KV cache holds, per sequence, a key and a value per layer, position and *KV* head::

    layers x 2 x positions x kv_heads x head_dim x bytes

With grouped-query attention (GQA) there are fewer KV heads than attention heads: the form
with the attention heads (``hidden_size`` = heads x head_dim) overstates the cache by
heads / kv_heads; the form without any head count understates it by kv_heads.

Units: GB, MB are 10^9, 10^6 bytes (as bandwidth is quoted); the memory plan prints MiB/GiB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgepipe.planning.kv import kv_cache_bytes
from edgepipe.planning.weights import DTYPES

DTYPE_BYTES: dict[str, float] = {
    name: float(size) for name, size in DTYPES.values() if name in ("fp32", "fp16", "bf16", "int8", "int4")
}
"""Bytes per weight (or cache element) of each dtype the planner knows (from the one table)."""
SMALLER_DTYPES = ("fp16", "int8", "int4")
"""Weight dtypes to suggest quantizing to, largest first."""


@dataclass(frozen=True)
class ModelFacts:
    """What the sums need to know of a language model."""

    source: str
    """Where the facts come from: ``--param-count`` or the model's path."""
    params: int
    dtype: str
    """The weights' dtype (a key of :data:`DTYPE_BYTES`)."""
    weight_bytes: int
    """What one token reads: the weights' bytes."""
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    heads: int | None = None
    """Attention (query) heads, when known: only to say what the GQA-blind form would give."""
    kv_dtype: str = "fp16"
    notes: tuple[str, ...] = ()
    formats: tuple[tuple[str, int], ...] = ()
    """``(dtype, parameters)`` as the model file stores them, most first (empty: not read from a file)."""
    packed_params: int = 0
    """Parameters packed for ``MatMulNBits`` (ONNX Runtime's 4- and 8-bit MatMul)."""

    def weight_format(self) -> str:
        """``int4 weights (450,560 of them packed in MatMulNBits; 41,603 in fp32)``: the dtype of
        most parameters, how they are stored, and the parameters held in other dtypes."""
        counts = dict(self.formats)
        # A few index constants (int64 shapes) are parameters too, but no weight format.
        shown = [(dtype, n) for dtype, n in self.formats if dtype != self.dtype and n * 1000 >= self.params]
        others = [f"{n:,} in {dtype}" for dtype, n in shown]
        if not others and not self.packed_params:
            return f"{self.dtype} weights"
        main = counts.get(self.dtype, self.params)
        how = " packed in MatMulNBits" if self.packed_params >= main else ""
        return f"{self.dtype} weights ({'; '.join([f'{main:,} of them{how}', *others])})"

    @classmethod
    def from_count(
        cls,
        params: float,
        dtype: str,
        *,
        layers: int | None = None,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        heads: int | None = None,
    ) -> ModelFacts:
        """Facts from a parameter count alone (``--param-count 3e9 --dtype fp16``). Raises
        ValueError for a count that is not a positive whole number (``3.5`` is not rounded)."""
        if not (params >= 1 and math.isfinite(params) and params == int(params)):
            raise ValueError(f"--param-count {params!r}: a parameter count is a positive whole number (3e9)")
        count = int(params)
        kv_dtype = "fp32" if dtype == "fp32" else "fp16"
        return cls(
            f"--param-count {params:g}",
            count,
            dtype,
            int(count * DTYPE_BYTES[dtype]),
            layers=layers,
            kv_heads=kv_heads,
            head_dim=head_dim,
            heads=heads,
            kv_dtype=kv_dtype,
        )

    @property
    def has_kv_shape(self) -> bool:
        return None not in (self.layers, self.kv_heads, self.head_dim)


@dataclass(frozen=True)
class KVTerms:
    """The KV cache of one sequence, term by term."""

    layers: int
    positions: int
    kv_heads: int
    head_dim: int
    itemsize: float

    @property
    def nbytes(self) -> int:
        return kv_cache_bytes(self.layers, self.kv_heads, self.positions, self.head_dim, self.itemsize)

    def formula(self) -> str:
        """``32 layers x 2 (K and V) x 2048 positions x 8 KV heads x head dim 128 x 2 bytes =
        268,435,456 bytes (268.4 MB)``."""
        return (
            f"{self.layers} layers x 2 (K and V) x {self.positions} positions x {self.kv_heads} KV heads"
            f" x head dim {self.head_dim} x {self.itemsize:g} bytes = {self.nbytes:,} bytes"
            f" ({decimal(self.nbytes)})"
        )

    def other_forms(self, heads: int | None) -> list[str]:
        """What the often-quoted forms would give, and by how much they are off."""
        forms = []
        if self.kv_heads > 1:
            without = self.nbytes // self.kv_heads
            forms.append(
                f"without the KV-head count (layers x 2 x positions x head dim x bytes) it would be "
                f"{decimal(without)}: {self.kv_heads}x too small"
            )
        if heads is not None and heads > self.kv_heads:
            with_heads = self.nbytes * heads // self.kv_heads
            forms.append(
                f"with the {heads} attention heads instead of the {self.kv_heads} KV heads (hidden size "
                f"{heads * self.head_dim}) it would be {decimal(with_heads)}: {heads / self.kv_heads:g}x too "
                "big (the model uses grouped-query attention)"
            )
        return forms


@dataclass(frozen=True)
class Throughput:
    """Per token: what is read and computed; at ``tokens_per_s``: what that needs."""

    bytes_per_token: int
    ops_per_token: float
    tokens_per_s: float | None
    bandwidth_gb_s: float | None
    """The device's (None: not known)."""
    tops: float | None

    @property
    def bandwidth_needed_gb_s(self) -> float | None:
        return None if self.tokens_per_s is None else self.bytes_per_token * self.tokens_per_s / 1e9

    @property
    def compute_needed_tops(self) -> float | None:
        return None if self.tokens_per_s is None else self.ops_per_token * self.tokens_per_s / 1e12

    @property
    def max_tokens_per_s_bandwidth(self) -> float | None:
        """The decode rate the peak bandwidth allows (an upper bound)."""
        return None if self.bandwidth_gb_s is None else self.bandwidth_gb_s * 1e9 / self.bytes_per_token

    @property
    def max_tokens_per_s_compute(self) -> float | None:
        return None if self.tops is None else self.tops * 1e12 / self.ops_per_token

    @property
    def binding(self) -> str | None:
        """``bandwidth`` or ``compute``: the limit that caps the token rate first (None when
        neither of the device's figures is known)."""
        rates = {"bandwidth": self.max_tokens_per_s_bandwidth, "compute": self.max_tokens_per_s_compute}
        known = {k: v for k, v in rates.items() if v is not None}
        return min(known, key=lambda k: known[k]) if known else None

    @property
    def fits(self) -> bool | None:
        """Whether the target rate is within both known limits (None: no target or no figure)."""
        if self.tokens_per_s is None:
            return None
        limits = [
            r for r in (self.max_tokens_per_s_bandwidth, self.max_tokens_per_s_compute) if r is not None
        ]
        return None if not limits else self.tokens_per_s <= min(limits)


def throughput(
    model: ModelFacts, tokens_per_s: float | None, bandwidth_gb_s: float | None, tops: float | None
) -> Throughput:
    return Throughput(model.weight_bytes, 2.0 * model.params, tokens_per_s, bandwidth_gb_s, tops)


def kv_terms(model: ModelFacts, positions: int) -> KVTerms | None:
    """The cache of one sequence of ``positions``, or None when the model's shape is unknown."""
    if model.layers is None or model.kv_heads is None or model.head_dim is None:
        return None
    return KVTerms(model.layers, positions, model.kv_heads, model.head_dim, DTYPE_BYTES[model.kv_dtype])


def quantize_advice(model: ModelFacts, tokens_per_s: float, bandwidth_gb_s: float) -> str:
    """What to change when ``tokens_per_s`` needs more than ``bandwidth_gb_s``."""
    now = DTYPE_BYTES[model.dtype]
    for dtype in SMALLER_DTYPES:
        if DTYPE_BYTES[dtype] >= now:
            continue
        needed = model.params * DTYPE_BYTES[dtype] * tokens_per_s / 1e9
        if needed <= bandwidth_gb_s:
            return f"quantize the weights to {dtype}: {needed:.1f} GB/s at {tokens_per_s:g} tokens/s"
    best = min(now, DTYPE_BYTES["int4"])
    params = bandwidth_gb_s * 1e9 / (best * tokens_per_s)
    rate = bandwidth_gb_s * 1e9 / model.weight_bytes
    return (
        f"even int4 weights need more: at most {math.floor(rate * 10) / 10:g} tokens/s, or a model of "
        f"at most {params / 1e9:.2g}B parameters in {'int4' if best == 0.5 else model.dtype}"
    )


def decimal(nbytes: float) -> str:
    """Bytes in decimal units, as bandwidth and datasheets count them: ``268.4 MB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} bytes"
