"""Generation on one runner: prompt -> token ids -> text pieces, with per-request timings.

:class:`LanguageModel` puts a :class:`~edgepipe.lm.runner.DecoderRunner`, its tokenizer and
the requests on its slots (:class:`~edgepipe.lm.batch.BatchDecoder`) together.
:meth:`LanguageModel.tokens` is the synchronous one-request way (a generator: each ``next()``
is one model step or less, so a caller can stop at any token; a speculative step writes
several); prefill and decode are timed apart and kept apart in :class:`GenerationStats`.
:class:`~edgepipe.lm.LMWorker` serves several requests at once on the same decoder.

A text prompt goes to the model as written (after the start token the tokenizer puts first,
if any), or with ``chat=True`` inside the model's chat format (:mod:`edgepipe.lm.chat`) where
its folder has one. A chat model's end-of-turn token ends generation either way.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Generator, Iterator, Sequence

from edgepipe.infer.session import SessionConfig
from edgepipe.lm.batch import DEFAULT_DRAFTS, BatchDecoder, Overflow
from edgepipe.lm.chat import ChatFormat, load_chat
from edgepipe.lm.layout import InputNames
from edgepipe.lm.pieces import PieceStream
from edgepipe.lm.runner import DecoderRunner
from edgepipe.lm.sampling import SamplingParams
from edgepipe.lm.stats import GenerationStats
from edgepipe.lm.tokenizer import Tokenizer, load_tokenizer
from edgepipe.sched.gate import gate as current_gate

__all__ = ["GenerationStats", "LanguageModel", "Overflow"]


class LanguageModel:
    """A decoder model, its tokenizer and its KV cache of ``slots`` requests. The blocking
    methods here run one request at a time; :class:`~edgepipe.lm.LMWorker` runs several."""

    def __init__(self, model: str | os.PathLike[str], *, max_seq_len: int | None = None,
                 prefill_chunk: int = 64, session: SessionConfig | None = None,
                 names: InputNames | None = None, owner: str = "", slots: int = 1,
                 speculate: int = DEFAULT_DRAFTS) -> None:  # fmt: skip
        """``slots``: requests decoded together (see :class:`DecoderRunner`); ``speculate``:
        the most drafts a speculative step carries (0: off; see :mod:`edgepipe.lm.speculate`)."""
        self.runner = DecoderRunner(model, max_seq_len=max_seq_len, prefill_chunk=prefill_chunk,
                                    session=session, names=names, owner=owner, slots=slots)  # fmt: skip
        self.tokenizer: Tokenizer = load_tokenizer(self.runner.folder, self.runner.vocab, self.runner.config)
        self.chat: ChatFormat | None = (
            load_chat(self.runner.folder, self.tokenizer.token_id)
            if (self.runner.folder / "tokenizer.json").is_file()
            else None
        )
        """The folder's chat format (None: prompts go as written)."""
        self.decoder = BatchDecoder(self.runner, speculate)
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
        """Ask every running request to stop (from any thread): each ends before its next model
        run, between prompt chunks too, and a step waiting at the CPU gate (paced by the
        governor) stops waiting. A request made after this call is not affected (:meth:`tokens`
        and :meth:`pieces` start a new one when called, not at their first step)."""
        self._cancel.set()
        for request in list(self.decoder.requests):
            request.cancelled = True
        current_gate().wake()

    def begin(self) -> None:
        """A new request begins (what :meth:`tokens` does when called): an earlier
        :meth:`cancel` no longer applies."""
        self._cancel.clear()

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
        """Generated token ids, one model step per ``next()`` at most. Blocking.

        ``overflow="refuse"`` raises :class:`ContextOverflow` before any work when the prompt
        plus ``max_new_tokens`` would pass ``max_seq_len``; ``"stop"`` runs until the cache is
        full and ends with ``stop_reason="max_seq_len"``. The request begins with this call: a
        :meth:`cancel` from then on ends it, even before its first step.
        """
        self.begin()
        return self._tokens(prompt, params, overflow)

    def _tokens(self, prompt: Sequence[int], params: SamplingParams | None,
                overflow: Overflow) -> Generator[int, None, None]:  # fmt: skip
        # This request's figures from the start: a refused request must not leave the previous
        # one's in ``stats``.
        self.stats = GenerationStats(prompt_tokens=len(prompt))
        decoder = self.decoder
        request = decoder.join(prompt, params, overflow, self.stop_ids)
        self.stats = request.stats
        try:
            while True:
                yield from decoder.take(request)
                if request.done:
                    return
                if self._cancel.is_set():
                    request.cancelled = True
                decoder.step()
        finally:  # the caller stopped asking: the request is cancelled at this token
            decoder.leave(request)  # unless it was complete anyway

    def pieces(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
               overflow: Overflow = "refuse", every_token: bool = False, *, chat: bool = False,
               system: str | None = None) -> Iterator[str]:  # fmt: skip
        """Text pieces as they are generated (whole characters only); stop strings end it.
        ``prompt`` is text or token ids; ``chat`` and ``system`` apply to text (see
        :meth:`prompt_ids`). ``every_token``: one item per model step, ``""`` for a step whose
        text is not out yet (part of a character, or of a possible stop string), so a caller
        can pace the steps themselves. Like :meth:`tokens`, the request begins with the call."""
        self.begin()
        return self._pieces(prompt, params, overflow, every_token, chat, system)

    def piece_stream(self, params: SamplingParams) -> PieceStream:
        """Token ids -> text pieces for one request (its own decoder state and stop strings)."""
        ends = set(params.stop_tokens) | (set() if params.ignore_eos else set(self.stop_ids))
        return PieceStream(self.tokenizer.text_stream(), params.stop_strings, frozenset(ends))

    def _pieces(self, prompt: str | Sequence[int], params: SamplingParams | None, overflow: Overflow,
                every_token: bool, chat: bool, system: str | None) -> Iterator[str]:  # fmt: skip
        params = params or SamplingParams()
        stream = self.piece_stream(params)
        ids = self.prompt_ids(prompt, chat=chat, system=system) if isinstance(prompt, str) else list(prompt)
        steps = self._tokens(ids, params, overflow)
        for token in steps:
            piece = stream.push(token)
            if stream.stopped:
                steps.close()  # ends the model steps now (their reason says cancelled) ...
                self.stats.stop_reason = "stop_string"  # ... and this is why
                if piece:
                    yield piece
                return
            if piece or every_token:
                yield piece
        piece = stream.finish()
        if stream.stopped:  # in the text the stream held to the end
            self.stats.stop_reason = "stop_string"
        if piece:
            yield piece

    def complete(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
                 overflow: Overflow = "refuse", *, chat: bool = False,
                 system: str | None = None) -> str:  # fmt: skip
        """The whole generated text (blocking)."""
        return "".join(self.pieces(prompt, params, overflow, chat=chat, system=system))
