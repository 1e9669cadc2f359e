"""Speculative decoding without a second model: drafts looked up in the request's own tokens.

A description of a camera repeats its prompt (object names, counts, the camera's name) and
itself, so the tokens that followed the last few tokens earlier in the request are a cheap guess
at what comes next (prompt lookup, n-gram drafting). One model step then feeds the last token
and the ``k`` drafts, and keeps the drafts as far as the model agrees (greedy: token for token
what plain decoding writes; sampled: :meth:`~edgepipe.lm.sampling.Sampler.verify`). The cost
is a wider step; on a CPU a step reads every weight once whatever its width, so a few extra
positions cost little and every kept draft is a token for free.

:class:`PromptLookup` drafts for one request; :class:`Speculation` decides, per model, how many
drafts a step may carry: it times plain and verify steps and stops drafting (for a while, then
longer) when the tokens a verify step wins do not pay for its extra time, and a request whose
drafts keep missing stops drafting on its own for a while.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_NGRAM = 3
_BACKOFF_STEPS = (8, 32, 128)
_EMA = 0.2


class PromptLookup:
    """The next tokens after the latest earlier occurrence of the sequence's last n tokens
    (n from :data:`MAX_NGRAM` down to 1), from an index kept up to date as tokens come."""

    def __init__(self, sequence: list[int]) -> None:
        self.sequence = sequence
        """The prompt and what was generated so far (the caller appends to it)."""
        self._index: list[dict[tuple[int, ...], int]] = [{} for _ in range(MAX_NGRAM)]
        self._indexed = 0  # n-grams ending before this index are in the index
        self.misses = 0
        """Verify steps in a row whose drafts were all rejected."""
        self.pause = 0
        """Steps to go without drafting (after misses)."""

    def draft(self, count: int) -> list[int]:
        seq = self.sequence
        end = len(seq)
        if count <= 0 or end < 2:
            return []
        # Register each n-gram that has a token after it: the last one is what we look up.
        for i in range(self._indexed, end - 1):
            for n in range(1, MAX_NGRAM + 1):
                if i - n + 1 >= 0:
                    self._index[n - 1][tuple(seq[i - n + 1 : i + 1])] = i + 1
        self._indexed = max(self._indexed, end - 1)
        for n in range(min(MAX_NGRAM, end - 1), 0, -1):
            at = self._index[n - 1].get(tuple(seq[end - n :]))
            if at is not None:
                return seq[at : at + count]
        return []

    def verified(self, drafted: int, kept: int) -> None:
        """A verify step kept ``kept`` of ``drafted`` drafts: two misses in a row pause this
        request's drafting, a little longer each time."""
        if not drafted:
            return
        if kept:
            self.misses = 0
            return
        self.misses += 1
        if self.misses >= 2:
            self.pause = _BACKOFF_STEPS[min(self.misses - 2, len(_BACKOFF_STEPS) - 1)]


@dataclass(slots=True)
class Speculation:
    """How many drafts a step may carry, for one model, from what verify steps cost and win."""

    max_drafts: int
    plain_s: float = 0.0
    """Time of a one-token step (a moving average)."""
    verify_s: float = 0.0
    """Time of a verify step (a moving average)."""
    won: float = 0.0
    """Tokens a verify step writes (a moving average; a plain step writes 1)."""
    pause: int = 0
    """Steps to go without drafting."""
    _backoffs: int = 0
    _window: int = 0  # verify steps since the averages were last reset
    steps: int = 0
    verify_steps: int = 0
    drafted: int = 0
    accepted: int = 0

    def allowed(self) -> int:
        """Drafts the next step may carry (0: a plain step)."""
        if self.max_drafts <= 0:
            return 0
        if self.pause > 0:
            self.pause -= 1
            return 0
        return self.max_drafts

    def record(self, seconds: float, drafted: int, accepted: int, rows: int) -> None:
        """A step took ``seconds``; its rows carried ``drafted`` drafts and kept ``accepted``."""
        self.steps += 1
        if rows > 1:
            return  # drafts ride only with a request decoding alone: batched steps are not compared
        if not drafted:
            self.plain_s = seconds if not self.plain_s else self.plain_s + _EMA * (seconds - self.plain_s)
            return
        self.verify_steps += 1
        self._window += 1
        self.drafted += drafted
        self.accepted += accepted
        tokens = 1 + accepted  # the last token's pick and the kept drafts
        self.verify_s = seconds if not self.verify_s else self.verify_s + _EMA * (seconds - self.verify_s)
        self.won = tokens if not self.won else self.won + _EMA * (tokens - self.won)
        if self.plain_s and self._window >= 4 and self.won * self.plain_s < self.verify_s:
            # Verify steps win fewer tokens than their time would buy in plain steps: stop
            # drafting, and for longer each time it happens again.
            self.pause = _BACKOFF_STEPS[min(self._backoffs, len(_BACKOFF_STEPS) - 1)]
            self._backoffs += 1
            self.won = 0.0
            self.verify_s = 0.0
            self._window = 0
        elif self._backoffs and self.won * self.plain_s > 1.2 * self.verify_s:
            self._backoffs -= 1  # paying well again: the next pause is shorter

    @property
    def accepted_per_step(self) -> float:
        """Drafts kept per verify step (0 with none)."""
        return self.accepted / self.verify_steps if self.verify_steps else 0.0
