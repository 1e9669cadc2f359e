"""How closely a quantized language model follows its source, on prompts.

For each prompt the source model continues greedily for ``positions`` tokens; that continuation
is teacher-forced through the quantized model too, so both predict the next token from the same
text at every position (the quantized model's own choices never steer it elsewhere). At each of
those positions, both models' logits are compared:

- **cosine**: cosine similarity of the two logit vectors (1 for the same direction);
- **top-1 agreement**: the share of positions where the quantized model's most likely next
  token is the source's greedy choice.

The prompt goes in as one chunk, then the continuation one token per step, as in decoding.
Both models run in this process, one step each in turn. A prompt too long for the positions
asked is cut to its last tokens that fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgepipe.infer.config import SessionConfig
from edgepipe.lm.generate import LanguageModel

PROMPTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "The capital of France is",
)
"""The prompts used when none are given: prose, a story, code, a fact."""
RUN_TIMEOUT_S = 120.0
"""Deadline of one model run: a one-off check on a large model, not live decoding."""


@dataclass(frozen=True, slots=True)
class Agreement:
    """The quantized model against its source, over every compared position."""

    prompts: int
    positions: int
    """Positions compared, over all prompts."""
    cosine_mean: float
    cosine_min: float
    top1: float
    """Share of positions where both models' most likely next token is the same."""

    def to_dict(self) -> dict[str, float | int]:
        return {
            "prompts": self.prompts,
            "positions": self.positions,
            "cosine_mean": self.cosine_mean,
            "cosine_min": self.cosine_min,
            "top1": self.top1,
        }


def agreement(
    src: Path,
    dst: Path,
    prompts: Sequence[str] = PROMPTS,
    positions: int = 32,
    *,
    threads: int | None = None,
    advance: Callable[[], None] | None = None,
) -> Agreement:
    """Compare the models in folders ``src`` and ``dst`` on ``prompts``, ``positions`` next-token
    predictions each (see the module docstring). Blocking. ``threads``: intra-op threads per
    model (None: edgepipe's default). ``advance`` is called after each prompt. Raises
    ValueError for no prompts, or fewer than one position."""
    if not prompts:
        raise ValueError("no prompts to compare the models on")
    if positions < 1:
        raise ValueError(f"positions must be 1 or more, not {positions}")
    config = SessionConfig(threads=threads, timeout_s=RUN_TIMEOUT_S, cache_optimized=False)
    source = LanguageModel(src, session=config)
    try:
        quantized = LanguageModel(dst, session=config)
        try:
            cosines: list[float] = []
            same = 0
            for prompt in prompts:
                c, s = _compare(source, quantized, prompt, positions)
                cosines += c
                same += s
                if advance is not None:
                    advance()
        finally:
            quantized.close()
    finally:
        source.close()
    return Agreement(
        prompts=len(prompts),
        positions=len(cosines),
        cosine_mean=float(np.mean(cosines)),
        cosine_min=float(np.min(cosines)),
        top1=same / len(cosines),
    )


def _compare(
    source: LanguageModel, quantized: LanguageModel, prompt: str, positions: int
) -> tuple[list[float], int]:
    """(cosine at each position, positions whose top-1 token agrees) for one prompt."""
    room = min(source.max_seq_len, quantized.max_seq_len)
    steps = min(positions, room - 1)  # at least one prompt token
    ids = source.encode(prompt)[-(room - steps) :] or [0]
    source.runner.reset()
    quantized.runner.reset()
    # feed() returns a view of the runner's buffer: read it before the next feed.
    a = source.runner.feed(ids)
    b = quantized.runner.feed(ids)
    cosines: list[float] = []
    same = 0
    for step in range(steps):
        token = int(np.argmax(a))
        cosines.append(cosine(a, b))
        same += int(np.argmax(b)) == token
        if step + 1 < steps:
            a = source.runner.feed((token,))
            b = quantized.runner.feed((token,))
    return cosines, same


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors, in float64; 1.0 for two zero vectors, 0.0 for one."""
    x, y = a.astype(np.float64), b.astype(np.float64)
    norms = float(np.linalg.norm(x) * np.linalg.norm(y))
    if norms == 0.0:
        return 1.0 if not x.any() and not y.any() else 0.0
    return float(x @ y / norms)
