"""Errors of the inference layer, under :class:`edgepipe.EdgepipeError`.

::

    EdgepipeError
    └── InferError                 anything about a model or a run           (model)
        ├── ModelNotFound          no file at the path, no such registry name  (retryable=False)
        ├── ModelPullError         the registry download or its checksum failed (retryable=False)
        ├── ModelLoadError         ONNX Runtime cannot load the file: corrupt, truncated, not ONNX
        ├── UnsupportedOperator    an operator no chosen provider can run       (op, provider)
        ├── ModelInputError        a feed has the wrong name, rank, shape or dtype (input_name)
        └── InferTimeout           a run passed its deadline and was terminated (also TimeoutError)

Errors found at start-up (the first four) are not worth retrying: ``retryable = False`` makes a
node stop at once instead of restarting into the same failure.
"""

from __future__ import annotations

from edgepipe.core.errors import EdgepipeError


class InferError(EdgepipeError):
    """A model could not be found, loaded or run. ``model`` names it (a path or registry name)."""

    retryable = True

    def __init__(self, message: str, *, model: str) -> None:
        self.model = model
        super().__init__(f"model {model}: {message}")


class ModelNotFound(InferError):
    """Neither a file at that path nor a name in the registry."""

    retryable = False


class ModelPullError(InferError):
    """Fetching a registry model failed: offline, registry error, or a checksum mismatch."""

    retryable = False


class ModelLoadError(InferError):
    """ONNX Runtime refused the file: not ONNX, truncated, or a graph it cannot build."""

    retryable = False


class UnsupportedOperator(ModelLoadError):
    """An operator that none of the session's execution providers implement."""

    def __init__(self, message: str, *, model: str, op: str, provider: str) -> None:
        self.op = op
        self.provider = provider
        super().__init__(message, model=model)


class ModelInputError(InferError, ValueError):
    """A feed does not fit the model's declared input (name, rank, fixed dims or dtype)."""

    retryable = False

    def __init__(self, message: str, *, model: str, input_name: str) -> None:
        self.input_name = input_name
        super().__init__(message, model=model)


class InferTimeout(InferError, TimeoutError):
    """A run passed its deadline; ONNX Runtime was told to terminate it (``RunOptions``)."""
