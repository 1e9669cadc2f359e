"""Generation on one runner: prompt -> token ids -> text pieces, with per-request timings.

:class:`LanguageModel` puts a :class:`~edgepipe.lm.runner.DecoderRunner`, its tokenizer and a
sampler together. :meth:`LanguageModel.tokens` is the synchronous core (a generator: each
``next()`` is one model step, so a caller can stop at any token); prefill and decode are timed
apart and kept apart in :class:`GenerationStats`.

A text prompt goes to the model as written (after the start token the tokenizer puts first,
if any), or with ``chat=True`` inside the model's chat format (:mod:`edgepipe.lm.chat`) where
its folder has one. A chat model's end-of-turn token ends generation either way.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from edgepipe.infer.session import SessionConfig
from edgepipe.lm.chat import ChatFormat, load_chat
from edgepipe.lm.errors import ContextOverflow
from edgepipe.lm.layout import InputNames
from edgepipe.lm.runner import DecoderRunner
from edgepipe.lm.sampling import Sampler, SamplingParams
from edgepipe.lm.tokenizer import Tokenizer, load_tokenizer
from edgepipe.sched.gate import AdmissionCancelled
from edgepipe.sched.gate import gate as current_gate

Overflow = Literal["refuse", "stop"]


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

    @property
    def tpot_ms(self) -> float:
        """Mean time per output token after the first."""
        return float(np.mean(self.token_ms)) if self.token_ms else 0.0

    @property
    def tpot_p95_ms(self) -> float:
        return float(np.percentile(self.token_ms, 95)) if self.token_ms else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return 1000.0 / self.tpot_ms if self.token_ms else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens,
            "prefill_ms": round(self.prefill_ms, 3), "ttft_ms": round(self.ttft_ms, 3),
            "tpot_ms": round(self.tpot_ms, 3), "tpot_p95_ms": round(self.tpot_p95_ms, 3),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 2), "stop_reason": self.stop_reason,
            "paced_ms": round(self.paced_ms, 3),
        }  # fmt: skip


class LanguageModel:
    """A decoder model, its tokenizer and its KV cache: one worker, one request at a time."""

    def __init__(self, model: str | os.PathLike[str], *, max_seq_len: int | None = None,
                 prefill_chunk: int = 64, session: SessionConfig | None = None,
                 names: InputNames | None = None, owner: str = "") -> None:  # fmt: skip
        self.runner = DecoderRunner(model, max_seq_len=max_seq_len, prefill_chunk=prefill_chunk,
                                    session=session, names=names, owner=owner)  # fmt: skip
        self.tokenizer: Tokenizer = load_tokenizer(self.runner.folder, self.runner.vocab, self.runner.config)
        self.chat: ChatFormat | None = (
            load_chat(self.runner.folder, self.tokenizer.token_id)
            if (self.runner.folder / "tokenizer.json").is_file()
            else None
        )
        """The folder's chat format (None: prompts go as written)."""
        self.sampler = Sampler(self.runner.vocab)
        self.stats = GenerationStats()
        """The latest request's figures."""
        self._cancel = threading.Event()
        # A step waiting at the CPU gate (for its pace, or behind a detection) ends its wait
        # when the request is cancelled, instead of running once more.
        self.runner.session.ticket.cancel = self._cancel

    def close(self) -> None:
        """Free the KV cache and the model (see :meth:`DecoderRunner.close`). Blocking; call it
        on the thread that runs the steps, once none runs."""
        self.runner.close()

    def cancel(self) -> None:
        """Ask the running request to stop (from any thread): it ends before its next model run,
        between prompt chunks too, and a step waiting at the CPU gate (paced by the governor)
        stops waiting. A request made after this call is not affected (:meth:`tokens` and
        :meth:`pieces` start a new one when called, not at their first step)."""
        self._cancel.set()
        current_gate().wake()

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end a request: the tokenizer's end-of-sequence ids and the chat format's
        end of turn."""
        ends, chat = self.tokenizer.eos_ids, self.chat
        return ends + ((chat.end_id,) if chat is not None and chat.end_id not in ends else ())

    @property
    def max_seq_len(self) -> int:
        return self.runner.max_seq_len

    def encode(self, text: str, *, bos: bool = True) -> list[int]:
        ids = self.tokenizer.encode(text)
        if bos and self.tokenizer.bos_id is not None:
            ids.insert(0, self.tokenizer.bos_id)
        return ids

    def prompt_ids(self, prompt: str, *, chat: bool = False, system: str | None = None) -> list[int]:
        """The ids of a text prompt. ``chat``: as the user's turn in the model's chat format,
        after ``system`` (None: the format's default), where the folder has a format; the
        format says whether a start token comes first. Otherwise (and ``system`` unused) the
        text as written, after the tokenizer's start token."""
        if chat and self.chat is not None:
            return self.tokenizer.encode(self.chat.render(prompt, system))
        return self.encode(prompt)

    def tokens(self, prompt: Sequence[int], params: SamplingParams | None = None,
               overflow: Overflow = "refuse") -> Generator[int, None, None]:  # fmt: skip
        """Generated token ids, one model step per ``next()``. Blocking.

        ``overflow="refuse"`` raises :class:`ContextOverflow` before any work when the prompt
        plus ``max_new_tokens`` would pass ``max_seq_len``; ``"stop"`` runs until the cache is
        full and ends with ``stop_reason="max_seq_len"``. The request begins with this call: a
        :meth:`cancel` from then on ends it, even before its first step.
        """
        self._cancel.clear()
        return self._tokens(prompt, params, overflow)

    def _tokens(self, prompt: Sequence[int], params: SamplingParams | None,
                overflow: Overflow) -> Generator[int, None, None]:  # fmt: skip
        params = params or SamplingParams()
        # This request's figures from the start: a refused request must not leave the previous
        # one's in ``stats``.
        stats = self.stats = GenerationStats(prompt_tokens=len(prompt))
        limit = self.max_seq_len
        if len(prompt) == 0:
            raise ValueError("the prompt has no tokens")
        if len(prompt) >= limit or (overflow == "refuse" and len(prompt) + params.max_new_tokens > limit):
            raise ContextOverflow(
                f"prompt of {len(prompt)} tokens + max_new_tokens={params.max_new_tokens} does not fit "
                f"max_seq_len={limit}; shorten the prompt, ask for fewer tokens, or pass overflow='stop'",
                model=self.runner.session.name, needed=len(prompt) + params.max_new_tokens, limit=limit,
            )  # fmt: skip
        bad = [t for t in prompt if not 0 <= t < self.runner.vocab]
        if bad:
            raise ValueError(f"prompt token ids must be in 0..{self.runner.vocab - 1}; got {bad[:5]}")
        stops = set(params.stop_tokens)
        if not params.ignore_eos:
            stops.update(self.stop_ids)
        runner, sampler = self.runner, self.sampler
        sampler.start(params, list(prompt))
        t0 = time.perf_counter()
        runner.reset()
        logits: np.ndarray | None = None
        if not self._cancel.is_set():  # feed() always runs its first chunk
            # Cancelled while the prompt waited at the CPU gate: no logits.
            with contextlib.suppress(AdmissionCancelled):
                logits = runner.feed(prompt, cancel=self._cancel)
        if logits is None or self._cancel.is_set():
            stats.stop_reason = "cancelled"
            return
        stats.prefill_ms = (time.perf_counter() - t0) * 1000
        try:
            for index in range(params.max_new_tokens):
                token = sampler.pick(logits)
                if index == 0:
                    stats.ttft_ms = (time.perf_counter() - t0) * 1000
                stats.new_tokens += 1
                # Known before the token goes out: whoever paces the steps must not wait for
                # one that will not come.
                if token in stops:
                    stats.stop_reason = "stop_token"
                elif index + 1 == params.max_new_tokens:
                    stats.stop_reason = "max_new_tokens"
                elif runner.room() == 0:
                    stats.stop_reason = "max_seq_len"
                yield token
                if stats.stop_reason:
                    return
                if self._cancel.is_set():
                    stats.stop_reason = "cancelled"
                    return
                t_step = time.perf_counter()
                try:
                    logits = runner.feed((token,))
                except AdmissionCancelled:  # its wait at the CPU gate ended: no step ran
                    stats.stop_reason = "cancelled"
                    return
                stats.token_ms.append((time.perf_counter() - t_step) * 1000)
        except GeneratorExit:  # the caller stopped asking: the request is cancelled at this token
            stats.stop_reason = stats.stop_reason or "cancelled"  # unless it was complete anyway
            raise

    def pieces(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
               overflow: Overflow = "refuse", every_token: bool = False, *, chat: bool = False,
               system: str | None = None) -> Iterator[str]:  # fmt: skip
        """Text pieces as they are generated (whole characters only); stop strings end it.
        ``prompt`` is text or token ids; ``chat`` and ``system`` apply to text (see
        :meth:`prompt_ids`). ``every_token``: one item per model step, ``""`` for a token whose
        text is not out yet (part of a character, or of a possible stop string), so a caller
        can pace the steps themselves. Like :meth:`tokens`, the request begins with the call."""
        self._cancel.clear()
        return self._pieces(prompt, params, overflow, every_token, chat, system)

    def _pieces(self, prompt: str | Sequence[int], params: SamplingParams | None, overflow: Overflow,
                every_token: bool, chat: bool, system: str | None) -> Iterator[str]:  # fmt: skip
        params = params or SamplingParams()
        stream = self.tokenizer.text_stream()  # the tokenizer's own decoder, one per request
        ends = set(params.stop_tokens) | (set() if params.ignore_eos else set(self.stop_ids))
        pending = ""
        longest = max((len(s) for s in params.stop_strings), default=0)
        ids = self.prompt_ids(prompt, chat=chat, system=system) if isinstance(prompt, str) else list(prompt)
        steps = self._tokens(ids, params, overflow)
        for token in steps:
            if token in ends:
                continue  # no text; tokens() has ended the request with its reason
            pending += stream.push(token)
            if longest:
                hit = min((pending.find(s) for s in params.stop_strings if s in pending), default=-1)
                if hit >= 0:
                    steps.close()  # ends the model steps now (their reason says cancelled) ...
                    self.stats.stop_reason = "stop_string"  # ... and this is why
                    if pending[:hit]:
                        yield pending[:hit]
                    return
                # Hold back what could still be the start of a stop string.
                safe = len(pending) - (longest - 1)
                if safe > 0:
                    yield pending[:safe]
                    pending = pending[safe:]
                elif every_token:
                    yield ""
            elif pending:
                yield pending
                pending = ""
            elif every_token:
                yield ""
        pending += stream.flush()
        hit = min((pending.find(s) for s in params.stop_strings if s in pending), default=-1)
        if hit >= 0:  # in the text the stream held to the end
            self.stats.stop_reason = "stop_string"
            pending = pending[:hit]
        if pending:
            yield pending

    def complete(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
                 overflow: Overflow = "refuse", *, chat: bool = False,
                 system: str | None = None) -> str:  # fmt: skip
        """The whole generated text (blocking)."""
        return "".join(self.pieces(prompt, params, overflow, chat=chat, system=system))
