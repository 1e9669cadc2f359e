"""Choosing the next token: greedy, temperature, top-k, top-p, repetition penalty, seeded.

The sampler keeps its scratch arrays (a copy of the logits, probabilities, a seen-token mask)
for the vocabulary size and reuses them for every token. Greedy decoding reads the model's
logits in place and allocates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_TOP_P_CANDIDATES = 1024


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request chooses its tokens and when it stops."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    """0 chooses the most likely token every time (greedy); above 0 samples."""
    top_k: int = 0
    """Sample among the k most likely tokens only (0: no limit)."""
    top_p: float = 1.0
    """Sample among the smallest set of tokens whose probabilities add up to p."""
    repetition_penalty: float = 1.0
    """Above 1 makes tokens already in the prompt or the output less likely (CTRL-style)."""
    stop_tokens: tuple[int, ...] = ()
    """Token ids that end the generation (the tokenizer's end-of-sequence is added)."""
    stop_strings: tuple[str, ...] = ()
    """Texts that end the generation when they appear in the output (not included in it)."""
    seed: int | None = None
    """Same seed, same prompt, same model: same tokens."""
    ignore_eos: bool = False
    """Keep going past the tokenizer's end-of-sequence (benchmarks that need N tokens)."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if any(not s for s in self.stop_strings):
            raise ValueError("stop_strings must not contain an empty string")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0 or self.repetition_penalty <= 0:
            raise ValueError(
                "temperature >= 0, 0 < top_p <= 1, top_k >= 0 and repetition_penalty > 0, please"
            )


class Sampler:
    """Picks tokens from logits for one request at a time."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self._work = np.empty(vocab, np.float32)
        self._seen = np.zeros(vocab, bool)
        self._keep = np.zeros(vocab, bool)
        self._params = SamplingParams()
        self._rng = np.random.default_rng()

    def start(self, params: SamplingParams, prompt: list[int] | np.ndarray) -> None:
        self._params = params
        self._rng = np.random.default_rng(params.seed)
        self._seen[:] = False
        if params.repetition_penalty != 1.0:
            self._seen[np.asarray(prompt, np.intp)] = True

    def pick(self, logits: np.ndarray) -> int:
        p = self._params
        if p.repetition_penalty == 1.0 and p.temperature == 0.0:
            return int(np.argmax(logits))
        work = self._work
        np.copyto(work, logits)
        self._penalise(work, p)
        token = int(np.argmax(work)) if p.temperature == 0.0 else self._sample(work, p)
        if p.repetition_penalty != 1.0:
            self._seen[token] = True
        return token

    def verify(self, logits: np.ndarray, draft: int) -> tuple[int, bool]:
        """Speculative decoding's acceptance rule for a draft that came without probabilities
        (looked up, not sampled): greedy, the pick and whether it is the draft; sampled, the
        draft is kept with its probability p(draft), and otherwise a token is drawn from p with
        the draft taken out. Either way the tokens follow the distribution :meth:`pick` draws
        from (the standard rule, with the draft's own distribution a point mass)."""
        p = self._params
        if p.temperature == 0.0:
            token = self.pick(logits)
            return token, token == draft
        work = self._work
        np.copyto(work, logits)
        self._penalise(work, p)
        self._probabilities(work, p)
        if self._rng.random() < work[draft]:
            token, kept = draft, True
        else:
            work[draft] = 0.0
            token, kept = self._draw(work), False
        if p.repetition_penalty != 1.0:
            self._seen[token] = True
        return token, kept

    def _penalise(self, work: np.ndarray, p: SamplingParams) -> None:
        if p.repetition_penalty != 1.0:
            seen = self._seen
            # Divide positive logits and multiply negative ones: either way, less likely.
            work[seen] = np.where(
                work[seen] > 0, work[seen] / p.repetition_penalty, work[seen] * p.repetition_penalty
            )

    def _sample(self, work: np.ndarray, p: SamplingParams) -> int:
        self._probabilities(work, p)
        return self._draw(work)

    def _draw(self, work: np.ndarray) -> int:
        cumulative = np.cumsum(work)
        return int(
            min(
                np.searchsorted(cumulative, self._rng.random() * cumulative[-1], side="right"), self.vocab - 1
            )
        )

    def _probabilities(self, work: np.ndarray, p: SamplingParams) -> None:
        """Logits (penalised) -> the distribution sampling draws from, in place."""
        work /= np.float32(p.temperature)
        keep = self._keep
        if 0 < p.top_k < self.vocab:
            # Exactly k survive, ties at the k-th value included only as far as k allows.
            keep[:] = False
            keep[np.argpartition(work, -p.top_k)[-p.top_k :]] = True
            np.putmask(work, ~keep, -np.inf)
        work -= work.max()
        np.exp(work, out=work)
        work /= work.sum()
        if p.top_p < 1.0:
            # Sort only the likeliest candidates (a full sort of a 150k vocabulary costs
            # milliseconds per token); all of them if those do not reach p.
            count = min(self.vocab, p.top_k or _TOP_P_CANDIDATES)
            candidates = (
                np.argpartition(work, -count)[-count:] if count < self.vocab else np.arange(self.vocab)
            )
            order = candidates[np.argsort(-work[candidates])]
            cumulative = np.cumsum(work[order])
            if cumulative[-1] < p.top_p and count < self.vocab:
                order = np.argsort(-work)
                cumulative = np.cumsum(work[order])
            cut = int(np.searchsorted(cumulative, p.top_p)) + 1  # the smallest set reaching p
            keep[:] = False
            keep[order[:cut]] = True
            work *= keep
            work /= work.sum()
