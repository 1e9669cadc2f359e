"""Token decode: decoder-only language models in ONNX with a KV cache allocated once.

Work in progress (issue 5): the runner, cache, sampling, tokenizer and synchronous generation
are here; the async worker API, the ``Describe`` node and the benchmarks come next.
"""

from __future__ import annotations

from edgepipe.lm.errors import ContextOverflow, DecoderLayoutError, LMError, TokenizerMismatch
from edgepipe.lm.generate import GenerationStats, LanguageModel
from edgepipe.lm.layout import DecoderLayout, InputNames
from edgepipe.lm.runner import DecoderRunner
from edgepipe.lm.sampling import Sampler, SamplingParams

__all__ = [
    "ContextOverflow",
    "DecoderLayout",
    "DecoderLayoutError",
    "DecoderRunner",
    "GenerationStats",
    "InputNames",
    "LMError",
    "LanguageModel",
    "Sampler",
    "SamplingParams",
    "TokenizerMismatch",
]
