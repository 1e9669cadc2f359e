"""The figures of one generation request: prompt, time to first token, time per output token."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class GenerationStats:
    """Timings of one request. Prefill and per-token decode are never averaged together."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    prefill_ms: float = 0.0
    """The prompt's run through the model."""
    ttft_ms: float = 0.0
    """From the request's start to its first token (prefill + the first pick)."""
    token_ms: list[float] = field(default_factory=list)
    """Each decode step after the first token."""
    stop_reason: str = ""
    """``stop_token``, ``stop_string``, ``max_new_tokens``, ``max_seq_len`` or ``cancelled``."""
    paced_ms: float = 0.0
    """Time the worker held tokens back to keep under its ``max_tokens_per_s`` (not in TPOT)."""
    steps: int = 0
    """Decode steps the request took part in (a speculative step may write several tokens)."""
    accepted: int = 0
    """Drafts its speculative steps kept (tokens written beyond one a step)."""

    @property
    def accepted_per_step(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0

    @property
    def tpot_ms(self) -> float:
        """Mean time per output token after the first."""
        return float(np.mean(self.token_ms)) if self.token_ms else 0.0

    @property
    def tpot_p95_ms(self) -> float:
        return float(np.percentile(self.token_ms, 95)) if self.token_ms else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        tpot = self.tpot_ms
        return 1000.0 / tpot if tpot > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens,
            "prefill_ms": round(self.prefill_ms, 3), "ttft_ms": round(self.ttft_ms, 3),
            "tpot_ms": round(self.tpot_ms, 3), "tpot_p95_ms": round(self.tpot_p95_ms, 3),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 2), "stop_reason": self.stop_reason,
            "paced_ms": round(self.paced_ms, 3), "accepted_per_step": round(self.accepted_per_step, 3),
        }  # fmt: skip
