"""Which execution providers a session uses (its threads come from the CPU budget:
:mod:`edgepipe.sched.budget`).

ONNX Runtime lists the providers its build has (``get_available_providers()``); a provider in
that list can still fail to start (no driver, no device), so the session falls back along the
order below and warns once, naming what was skipped and why.
"""

from __future__ import annotations

from collections.abc import Sequence

PROVIDER_ORDER: tuple[str, ...] = (
    "TensorrtExecutionProvider",
    "CUDAExecutionProvider",
    "OpenVINOExecutionProvider",
    "CoreMLExecutionProvider",
    "QNNExecutionProvider",
    "ROCMExecutionProvider",
    "DmlExecutionProvider",
    "CPUExecutionProvider",
)
"""Preference when the user names none: dedicated accelerators first, CPU always last."""

CPU = "CPUExecutionProvider"

_SHORT = {
    "tensorrt": "TensorrtExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "dml": "DmlExecutionProvider",
    "directml": "DmlExecutionProvider",
    "cpu": CPU,
}


def full_name(provider: str) -> str:
    """``cuda`` -> ``CUDAExecutionProvider``; full names pass through."""
    return _SHORT.get(provider.lower(), provider)


def short_name(provider: str) -> str:
    return provider.removesuffix("ExecutionProvider").lower()


def candidates(requested: Sequence[str] | None, available: Sequence[str]) -> tuple[list[str], list[str]]:
    """(providers to try in order, requested ones this build lacks).

    ``requested`` None means every available provider in :data:`PROVIDER_ORDER`. CPU is always
    appended as the last resort: a camera that cannot use its NPU today should still detect.
    """
    if requested is None:
        wanted = [p for p in PROVIDER_ORDER if p in available]
        missing: list[str] = []
    else:
        names = [full_name(p) for p in requested]
        wanted = [p for p in names if p in available]
        missing = [p for p in names if p not in available]
    if CPU not in wanted:
        wanted.append(CPU)
    return wanted, missing


_DEVICE_MEMORY = {
    "TensorrtExecutionProvider": "cuda",
    "CUDAExecutionProvider": "cuda",
    "DmlExecutionProvider": "dml",
    "CANNExecutionProvider": "cann",
}


def memory_device(provider: str, options: dict[str, str] | None = None) -> tuple[str, int]:
    """Where buffers a model keeps between runs (a KV cache) should live for this provider:
    ``(device_type, device_id)`` as IO binding names them. Providers that work on host memory
    (CPU, OpenVINO, CoreML, QNN) get ``("cpu", 0)``."""
    kind = _DEVICE_MEMORY.get(provider)
    if kind is None:
        return ("cpu", 0)
    return (kind, int((options or {}).get("device_id", 0) or 0))
