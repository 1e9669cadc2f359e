"""Two ways of running a model, fed the same inputs: how far their outputs drift apart.

The precision-alignment step before trusting an accelerator (the same model on CPU and on
CUDA, TensorRT, OpenVINO …) or a quantized model (FP32 file against INT8 file). Side A is the
reference. Per output, over every input:

- ``max_abs``, ``mean_abs``: of ``|b - a|``;
- ``rel_error``: ``‖b - a‖₂ / ‖a‖₂`` (the whole output's error against its size);
- ``cosine``: ``a·b / (‖a‖ ‖b‖)``, 1 for outputs that point the same way;
- ``outside``: elements past ``atol + rtol * |a|`` (``numpy.isclose``'s test, NaN equal to
  NaN); an output *diverges* when any element is outside.

Defaults (:data:`ATOL`, :data:`RTOL`) suit FP32 against FP32 on another provider; an INT8 side
needs looser ones (its error is the quantization step), which the caller states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ATOL = 1e-4
RTOL = 1e-3


@dataclass(slots=True)
class Divergence:
    """One output, accumulated over the inputs."""

    name: str
    shape: tuple[int, ...] = ()
    elements: int = 0
    outside: int = 0
    max_abs: float = 0.0
    _abs_sum: float = 0.0
    _dot: float = 0.0
    _norm_a: float = 0.0
    _norm_b: float = 0.0
    _diff_sq: float = 0.0
    mismatch: str = ""
    """Why the outputs cannot be compared (shapes differ), else empty."""

    def add(self, a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> None:
        self.shape = tuple(a.shape)
        if a.shape != b.shape:
            self.mismatch = f"shapes differ: {list(a.shape)} and {list(b.shape)}"
            return
        x = a.astype(np.float64, copy=False).ravel()
        y = b.astype(np.float64, copy=False).ravel()
        close = np.isclose(y, x, rtol=rtol, atol=atol, equal_nan=True)
        self.elements += x.size
        self.outside += int(x.size - np.count_nonzero(close))
        finite = np.isfinite(x) & np.isfinite(y)
        diff = np.abs(y - x)
        if not finite.all():
            # A NaN or inf on one side only is as far off as it gets.
            one_sided = np.isfinite(x) != np.isfinite(y)
            self.max_abs = np.inf if one_sided.any() else self.max_abs
            x, y, diff = x[finite], y[finite], diff[finite]
        if diff.size:
            self.max_abs = max(self.max_abs, float(diff.max()))
        self._abs_sum += float(diff.sum())
        self._dot += float(x @ y)
        self._norm_a += float(x @ x)
        self._norm_b += float(y @ y)
        self._diff_sq += float(diff @ diff)

    @property
    def mean_abs(self) -> float:
        return self._abs_sum / self.elements if self.elements else 0.0

    @property
    def rel_error(self) -> float:
        if self._norm_a == 0.0:
            return 0.0 if self._diff_sq == 0.0 else float("inf")
        return float(np.sqrt(self._diff_sq / self._norm_a))

    @property
    def cosine(self) -> float:
        if self._norm_a == 0.0 or self._norm_b == 0.0:
            return 1.0 if self._norm_a == self._norm_b else 0.0
        return float(self._dot / np.sqrt(self._norm_a * self._norm_b))

    @property
    def ok(self) -> bool:
        return not self.mismatch and self.outside == 0

    def figures(self) -> dict[str, float | None]:
        """max_abs, mean_abs, rel_error and cosine; None where there is no finite figure (an
        infinite error, or outputs of other shapes, never compared)."""
        values = {"max_abs": self.max_abs, "mean_abs": self.mean_abs, "rel_error": self.rel_error,
                  "cosine": self.cosine}  # fmt: skip
        return {k: None if self.mismatch or not np.isfinite(v) else v for k, v in values.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "shape": list(self.shape), **self.figures(),
            "outside": self.outside, "elements": self.elements, "ok": self.ok,
            **({"mismatch": self.mismatch} if self.mismatch else {}),
        }  # fmt: skip


@dataclass(slots=True)
class Comparison:
    """Side B against side A over a set of inputs."""

    sides: tuple[str, str]
    inputs: str
    """What was fed, in words (``3 random inputs``, ``4 frames of clip.mp4``)."""
    atol: float = ATOL
    rtol: float = RTOL
    samples: int = 0
    outputs: list[Divergence] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.outputs)

    def add(self, a: Sequence[np.ndarray], b: Sequence[np.ndarray], names: Sequence[str]) -> None:
        """One input's outputs from each side (in ``names`` order)."""
        if not self.outputs:
            self.outputs = [Divergence(name) for name in names]
        for divergence, x, y in zip(self.outputs, a, b, strict=True):
            divergence.add(x, y, self.atol, self.rtol)
        self.samples += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "sides": {"a": self.sides[0], "b": self.sides[1]}, "inputs": self.inputs,
            "samples": self.samples, "atol": self.atol, "rtol": self.rtol, "ok": self.ok,
            "outputs": [d.to_dict() for d in self.outputs],
        }  # fmt: skip


def compare(
    run_a: Any,
    run_b: Any,
    feeds: Iterable[Mapping[str, np.ndarray]],
    names: Sequence[str],
    comparison: Comparison,
) -> Comparison:
    """Feed each of ``feeds`` to both runs (callables: feeds -> outputs in ``names`` order) and
    add their outputs to ``comparison``. Blocking."""
    for feed in feeds:
        comparison.add(run_a(feed), run_b(feed), names)
    return comparison
