"""ONNX Runtime's exceptions turned into edgepipe's errors, with what the model expects."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from edgepipe.infer import providers
from edgepipe.infer.errors import InferError, ModelInputError, ModelLoadError, UnsupportedOperator
from edgepipe.infer.spec import TensorSpec

_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'")
_NO_OP = re.compile(r"No Op registered for (\w+) with domain_version of (\d+)")
_NO_CUSTOM_OP = re.compile(r"([\w.]+):(\w+)\(-?\d+\) is not a registered function/op")


def load_error(exc: Exception, path: Path, tried: list[str]) -> InferError:
    """The error to raise for an exception of ``InferenceSession(...)``."""
    text = str(exc)
    model = str(path)
    provider = ", ".join(providers.short_name(p) for p in tried)
    match = _NO_KERNEL.search(text)
    if match:
        op, version, node = match.groups()
        return UnsupportedOperator(
            f"operator {op} (opset {version}, node '{node}') has no kernel for these input types in "
            f"{provider}; re-export the model with supported types or choose another provider",
            model=model, op=op, provider=provider,
        )  # fmt: skip
    match = _NO_OP.search(text) or _NO_CUSTOM_OP.search(text)
    if match:
        op = match.group(2) if match.re is _NO_CUSTOM_OP else match.group(1)
        return UnsupportedOperator(
            f"operator {op} is unknown to ONNX Runtime {ort.__version__} ({provider}); it needs a newer "
            "runtime or a custom-op library, or re-export the model with standard operators",
            model=model, op=op, provider=provider,
        )  # fmt: skip
    if "INVALID_PROTOBUF" in text or "protobuf parsing failed" in text.lower():
        return ModelLoadError(
            "not a readable ONNX model (truncated or corrupt download?); fetch or export it again",
            model=model,
        )
    return ModelLoadError(f"ONNX Runtime cannot load it: {_short(text)}", model=model)


def run_error(
    exc: Exception, feeds: Mapping[str, np.ndarray], inputs: Sequence[TensorSpec], name: str
) -> InferError:
    """The error to raise for an exception of a run: which feed does not fit, and how."""
    text = str(exc)
    for spec in inputs:
        feed = feeds.get(spec.name)
        if feed is None:
            return ModelInputError(
                f"no feed for input '{spec.name}' "
                f"(expects {_shape_text(spec.shape)} {_dtype_text(spec)}); "
                f"given: {', '.join(feeds) or 'nothing'}",
                model=name, input_name=spec.name,
            )  # fmt: skip
        if not _fits(feed, spec):
            return ModelInputError(
                f"input '{spec.name}' expects {_shape_text(spec.shape)} {_dtype_text(spec)}, "
                f"got {tuple(feed.shape)} {feed.dtype}: {_what_to_do(feed, spec)}",
                model=name, input_name=spec.name,
            )  # fmt: skip
    unknown = [name for name in feeds if name not in {s.name for s in inputs}]
    if unknown:
        return ModelInputError(
            f"unknown input(s) {', '.join(unknown)}; the model's inputs are "
            f"{', '.join(s.name for s in inputs)}",
            model=name, input_name=unknown[0],
        )  # fmt: skip
    return InferError(f"run failed: {_short(text)}", model=name)


def _fits(feed: np.ndarray, spec: TensorSpec) -> bool:
    if spec.dtype is not None and feed.dtype != spec.dtype:
        return False
    if len(feed.shape) != len(spec.shape):
        return False
    return all(not isinstance(d, int) or d == n for d, n in zip(spec.shape, feed.shape, strict=True))


def _what_to_do(feed: np.ndarray, spec: TensorSpec) -> str:
    if spec.dtype is not None and feed.dtype != spec.dtype:
        return f"feed {_dtype_text(spec)}"
    if len(feed.shape) != len(spec.shape):
        return f"feed a tensor of {len(spec.shape)} dimensions"
    return ("its fixed dims were set when it was exported: feed that shape, or export it again with "
            "the dims that vary left free (dynamic axes)")  # fmt: skip


def _shape_text(shape: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _dtype_text(spec: TensorSpec) -> str:
    return np.dtype(spec.dtype).name if spec.dtype is not None else "(unmapped type)"


def _short(text: str) -> str:
    text = text.replace("[ONNXRuntimeError] : ", "").strip()
    return text if len(text) <= 400 else text[:400] + "…"
