"""Token decode: decoder-only language models in ONNX with a KV cache allocated once.

- :class:`DecoderRunner`: one model on one KV cache (shared buffer or concat, IO-bound);
- :class:`LanguageModel`: runner + tokenizer + sampler, blocking generation with its figures;
- :class:`LMWorker`: the async face (``async for piece in worker.generate(prompt)``);
- :class:`Describe`: the pipeline stage that writes about a :class:`SceneWindow` of results;
- :class:`ModelFolder`: a pipeline parameter that takes a model's folder, checked at the door;
- :class:`RemoteEngine`, :class:`RemoteLM`: a model on an OpenAI-compatible engine beyond the
  box (:mod:`edgepipe.lm.remote`), with the local model as its fallback (:mod:`.remote.engines`).
"""

from __future__ import annotations

from edgepipe.lm.describe import Describe
from edgepipe.lm.errors import (
    ContextOverflow,
    DecoderLayoutError,
    KVCacheAllocationError,
    LMError,
    MissingPackage,
    TokenizerMismatch,
)
from edgepipe.lm.folder import ModelFolder, folder_problem
from edgepipe.lm.generate import LanguageModel
from edgepipe.lm.layout import DecoderLayout, InputNames
from edgepipe.lm.remote.engine import RemoteEngine, RemoteLM
from edgepipe.lm.runner import DecoderRunner
from edgepipe.lm.sampling import Sampler, SamplingParams
from edgepipe.lm.scene import SceneWindow, SourceState
from edgepipe.lm.stats import GenerationStats
from edgepipe.lm.worker import LMWorker

__all__ = [
    "ContextOverflow",
    "DecoderLayout",
    "DecoderLayoutError",
    "DecoderRunner",
    "Describe",
    "GenerationStats",
    "InputNames",
    "KVCacheAllocationError",
    "LMError",
    "LMWorker",
    "RemoteEngine",
    "RemoteLM",
    "LanguageModel",
    "MissingPackage",
    "ModelFolder",
    "Sampler",
    "SamplingParams",
    "SceneWindow",
    "SourceState",
    "TokenizerMismatch",
    "folder_problem",
]
