"""Continuous batching: the requests on a runner's slots advance together, one step at a time.

:class:`BatchDecoder` takes requests (:meth:`join`) onto free slots and, at each :meth:`step`,
runs one chunk of the prompt of the first request still reading its prompt (one chunk, so a
joining request holds the others up by one chunk at most) and then one batched step in which
every request past its prompt writes its next token (or, decoding alone, its next tokens: a
speculative step, :mod:`edgepipe.lm.speculate`). Requests join and leave between steps;
sampling, stop tokens and limits are each request's own; cancelling one frees its slot and
leaves the others as they were. Blocking, on one thread (the worker's).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from edgepipe.lm.errors import ContextOverflow
from edgepipe.lm.runner import DecoderRunner
from edgepipe.lm.sampling import Sampler, SamplingParams
from edgepipe.lm.speculate import PromptLookup, Speculation
from edgepipe.lm.stats import GenerationStats
from edgepipe.sched.gate import AdmissionCancelled

Overflow = Literal["refuse", "stop"]

DEFAULT_DRAFTS = 4
"""Drafts a speculative step carries by default (``speculate=0`` turns it off)."""


@dataclass(eq=False, slots=True)
class Request:
    """One request on a slot: its tokens so far, its figures, whether it is over."""

    slot: int
    prompt: list[int]
    params: SamplingParams
    sampler: Sampler
    stops: frozenset[int]
    stats: GenerationStats
    sequence: list[int]
    """The prompt, then each token written (the drafts' lookup reads it)."""
    lookup: PromptLookup
    t_start: float
    fed: int = 0
    """Prompt tokens in the cache."""
    out: list[int] = field(default_factory=list)
    """Tokens written and not yet taken by the caller (:meth:`BatchDecoder.take`)."""
    logits: np.ndarray | None = None
    """The prompt's last logits, until the first pick."""
    done: bool = False
    cancelled: bool = False
    """Set from any thread: the request ends before its next step."""

    @property
    def decoding(self) -> bool:
        return self.fed == len(self.prompt) and not self.done


class BatchDecoder:
    """The requests on one runner's slots."""

    def __init__(self, runner: DecoderRunner, speculate: int = DEFAULT_DRAFTS) -> None:
        self.runner = runner
        self.speculation = Speculation(max(0, speculate))
        self.requests: list[Request] = []
        self._free = list(range(runner.slots))

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def join(self, prompt: Sequence[int], params: SamplingParams | None = None, overflow: Overflow = "refuse",
             stop_ids: Sequence[int] = ()) -> Request:  # fmt: skip
        """A new request on a free slot (its prompt runs in the coming steps); ``stop_ids`` end
        it (the model's end tokens) unless ``params.ignore_eos``. Raises
        :class:`ContextOverflow` (nothing done) or ``ValueError`` for a prompt that cannot run,
        ``RuntimeError`` when no slot is free."""
        params = params or SamplingParams()
        runner = self.runner
        limit = runner.max_seq_len
        if len(prompt) == 0:
            raise ValueError("the prompt has no tokens")
        if len(prompt) >= limit or (overflow == "refuse" and len(prompt) + params.max_new_tokens > limit):
            raise ContextOverflow(
                f"prompt of {len(prompt)} tokens + max_new_tokens={params.max_new_tokens} does not fit "
                f"max_seq_len={limit}; shorten the prompt, ask for fewer tokens, or pass overflow='stop'",
                model=runner.session.name, needed=len(prompt) + params.max_new_tokens, limit=limit,
            )  # fmt: skip
        bad = [t for t in prompt if not 0 <= t < runner.vocab]
        if bad:
            raise ValueError(f"prompt token ids must be in 0..{runner.vocab - 1}; got {bad[:5]}")
        if not self._free:
            raise RuntimeError(f"all {runner.slots} slots are taken")
        slot = self._free.pop(0)
        stops = set(params.stop_tokens) | (set() if params.ignore_eos else set(stop_ids))
        sampler = Sampler(runner.vocab)
        sampler.start(params, list(prompt))
        sequence = list(prompt)
        request = Request(
            slot=slot, prompt=list(prompt), params=params, sampler=sampler, stops=frozenset(stops),
            stats=GenerationStats(prompt_tokens=len(prompt)), sequence=sequence,
            lookup=PromptLookup(sequence), t_start=time.perf_counter(),
        )  # fmt: skip
        self.requests.append(request)  # its slot's cache is taken at its first prompt chunk
        return request

    def leave(self, request: Request) -> None:
        """Take ``request`` off its slot (over, or given up): the slot is free."""
        if request in self.requests:
            self.requests.remove(request)
            self.runner.end(request.slot)
            self._free.append(request.slot)
            self._free.sort()
        if not request.done:
            request.done = True
            request.stats.stop_reason = request.stats.stop_reason or "cancelled"

    def take(self, request: Request) -> list[int]:
        """The tokens ``request`` wrote since the last call."""
        out, request.out = request.out, []
        return out

    def step(self) -> bool:
        """One prompt chunk (of the first request still reading its prompt) and one decode step
        for the requests past theirs; whether any request is left."""
        for request in [r for r in self.requests if r.cancelled and not r.done]:
            self._end(request, "cancelled")
        reading = next((r for r in self.requests if not r.done and r.fed < len(r.prompt)), None)
        decoding = [r for r in self.requests if r.decoding]  # a prompt done now decodes next step
        try:
            if reading is not None:
                self._prefill(reading)
            decoding = [r for r in decoding if not r.done]
            if decoding:
                self._decode(decoding)
        except AdmissionCancelled:  # its wait at the CPU gate ended: no step ran
            for request in self.requests:
                if request.cancelled and not request.done:
                    self._end(request, "cancelled")
        return any(not r.done for r in self.requests)

    def _end(self, request: Request, reason: str) -> None:
        """Over: its slot is free at once (its last tokens wait in ``out``)."""
        request.stats.stop_reason = request.stats.stop_reason or reason
        self.leave(request)

    def _prefill(self, request: Request) -> None:
        runner = self.runner
        if request.fed == 0:
            runner.begin(request.slot)  # one prompt at a time: the concat layout's joining pair
        chunk = request.prompt[request.fed : request.fed + runner.prefill_chunk]
        t0 = time.perf_counter()
        rows = runner.step((request.slot,), (chunk,))
        request.stats.prefill_ms += (time.perf_counter() - t0) * 1000
        request.fed += len(chunk)
        if request.fed < len(request.prompt):
            return
        runner.joined(request.slot)
        self._emit(request, [self._pick_first(request, rows[0][-1])])  # TTFT, not a decode step

    def _pick_first(self, request: Request, logits: np.ndarray) -> int:
        token = request.sampler.pick(logits)
        request.stats.ttft_ms = (time.perf_counter() - request.t_start) * 1000
        return token

    def _decode(self, decoding: list[Request]) -> None:
        runner, spec = self.runner, self.speculation
        slots = [r.slot for r in decoding]
        allowed = spec.allowed() if len(decoding) == 1 else 0
        if allowed:
            allowed = min(allowed, runner.width_room(slots) - 1)
        fed: list[list[int]] = []
        for request in decoding:
            guess: list[int] = []
            if allowed and request.lookup.pause:
                request.lookup.pause -= 1
            elif allowed:
                left = request.params.max_new_tokens - request.stats.new_tokens
                guess = request.lookup.draft(min(allowed, runner.room(request.slot) - 1, left - 1))
            fed.append([request.sequence[-1], *guess])
        t0 = time.perf_counter()
        rows = runner.step(slots, fed)
        step_s = time.perf_counter() - t0
        drafted = accepted = 0
        for request, logits, tokens in zip(decoding, rows, fed, strict=True):
            written: list[int] = []
            for i in range(len(tokens)):
                if i + 1 < len(tokens):
                    token, kept = request.sampler.verify(logits[i], tokens[i + 1])
                else:
                    token, kept = request.sampler.pick(logits[i]), False
                written.append(token)
                if not kept:
                    break
            drafts = len(tokens) - 1
            kept_drafts = len(written) - 1
            drafted += drafts
            accepted += kept_drafts
            request.lookup.verified(drafts, kept_drafts)
            request.stats.steps += 1
            request.stats.accepted += kept_drafts
            if drafts > kept_drafts:
                runner.rewind(request.slot, drafts - kept_drafts)
            self._emit(request, written, step_s * 1000 / len(written))
        spec.record(step_s, drafted, accepted, len(decoding))

    def _emit(self, request: Request, tokens: list[int], share_ms: float | None = None) -> None:
        """Hand tokens to the request (each but the last is in the cache already: kept
        drafts), checking its stops."""
        stats, params = request.stats, request.params
        for i, token in enumerate(tokens):
            stats.new_tokens += 1
            if share_ms is not None:
                stats.token_ms.append(share_ms)
            request.sequence.append(token)
            request.out.append(token)
            # Known with the token: whoever paces the steps must not wait for one that will not come.
            if token in request.stops:
                self._end(request, "stop_token")
            elif stats.new_tokens >= params.max_new_tokens:
                self._end(request, "max_new_tokens")
            elif i == len(tokens) - 1 and self.runner.room(request.slot) == 0:
                self._end(request, "max_seq_len")  # the token cannot be fed
            if request.done:
                return
