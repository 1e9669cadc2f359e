"""Errors of the language-model layer.

::

    EdgepipeError
    └── InferError
        └── LMError                  a decoder model or a request cannot be served   (model)
            ├── DecoderLayoutError   the model lacks the inputs/outputs a decoder needs
            ├── ContextOverflow      a request would pass max_seq_len              (needed, limit)
            ├── KVCacheAllocationError  the device could not hold the KV cache
            ├── TokenizerMismatch    the tokenizer's ids do not fit the model's vocabulary
            └── MissingPackage       a package the model's files need is not installed  (package)
"""

from __future__ import annotations

from edgepipe.infer.errors import InferError


class LMError(InferError):
    """A decoder model or one request to it cannot be served."""


class DecoderLayoutError(LMError):
    """The model is not a decoder in the Hugging Face / Optimum layout edgepipe runs."""

    retryable = False


class ContextOverflow(LMError, ValueError):
    """Prompt plus the tokens asked for do not fit in the KV cache (``max_seq_len``)."""

    retryable = False

    def __init__(self, message: str, *, model: str, needed: int, limit: int) -> None:
        self.needed = needed
        self.limit = limit
        super().__init__(message, model=model)


class TokenizerMismatch(LMError):
    """The tokenizer produces ids the model has no embedding for."""

    retryable = False


class KVCacheAllocationError(LMError, MemoryError):
    """The session's device could not allocate the KV cache (a smaller max_seq_len may fit)."""

    retryable = False


class MissingPackage(LMError):
    """A package the model's files need is not installed (or too old to read them): the
    ``tokenizers`` package for a ``tokenizer.json``. The message names the command to run."""

    retryable = False

    def __init__(self, message: str, *, model: str, package: str) -> None:
        self.package = package
        self.reason = message
        """The message without the model's name."""
        super().__init__(message, model=model)
