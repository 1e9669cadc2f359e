"""ONNX Runtime sessions (providers, threads, deadlines, optimized-model cache) and the model
registry (``edgepipe models``)."""

from __future__ import annotations

from edgepipe.infer.errors import (
    InferError,
    InferTimeout,
    ModelInputError,
    ModelLoadError,
    ModelNotFound,
    ModelPullError,
    UnsupportedOperator,
)
from edgepipe.infer.providers import PROVIDER_ORDER
from edgepipe.infer.registry import REGISTRY, ModelEntry, ResolvedModel, pull, resolve
from edgepipe.infer.session import Session, SessionConfig, SessionStats, TensorSpec

__all__ = [
    "PROVIDER_ORDER",
    "REGISTRY",
    "InferError",
    "InferTimeout",
    "ModelEntry",
    "ModelInputError",
    "ModelLoadError",
    "ModelNotFound",
    "ModelPullError",
    "ResolvedModel",
    "Session",
    "SessionConfig",
    "SessionStats",
    "TensorSpec",
    "UnsupportedOperator",
    "pull",
    "resolve",
]
