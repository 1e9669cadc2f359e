"""The async face of a language model: ``async for piece in worker.generate(prompt)``.

One :class:`LMWorker` owns one model and its KV cache of ``slots`` requests, and runs them on
a thread of its own, together: each step advances every request on a slot by a token
(continuous batching, :mod:`edgepipe.lm.batch`; whoever waits for a token drives the step for
all). Requests beyond the slots wait their turn: ``queue_size`` of them are admitted, callers
beyond that wait on their own ``await`` (backpressure; the worker keeps no list of them), and
``waiting`` says how many are in. Every step runs on the worker's
thread under the session's deadline (a step that hangs is terminated by ONNX Runtime and the
request fails with :class:`~edgepipe.infer.InferTimeout`); between steps control returns to the
event loop, so other work is scheduled between tokens. A caller that stops iterating (or is
cancelled) ends its request at the next token, or between two chunks of a long prompt; so does
:meth:`LMWorker.cancel` (a node that stops writing when the run stops), whose request then ends
as if complete, its ``stop_reason`` ``cancelled``: a step waiting at the CPU gate or for the
pace stops waiting, no further step runs.

``max_tokens_per_s`` paces decoding: before each decode step the worker waits on the event loop
(not on its thread) until the request's token count is back under the rate, so a language
model on a camera box takes only the share of a core it is given and detection keeps its
frames. The time held back is ``stats.paced_ms``; TPOT counts model time only.

:meth:`close` stops it and frees the model and its KV cache (out of the memory plan too) as
soon as no step runs; :meth:`start` loads them again, so a node that runs a worker can restart.

Stop early with ``contextlib.aclosing`` (``async with aclosing(worker.generate(p)) as pieces``):
an async generator abandoned by ``break`` is only closed when it is garbage-collected, and until
then it holds the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

from edgepipe.core.context import current_node
from edgepipe.core.cputime import TOKENS
from edgepipe.core.executor import DaemonThreadPool
from edgepipe.core.threadname import Tag
from edgepipe.infer.session import SessionConfig
from edgepipe.lm.batch import DEFAULT_DRAFTS, Request
from edgepipe.lm.errors import LMError
from edgepipe.lm.folder import check_packages
from edgepipe.lm.generate import GenerationStats, LanguageModel, Overflow
from edgepipe.lm.pieces import PieceStream
from edgepipe.lm.sampling import SamplingParams
from edgepipe.sched.gate import Ticket

log = logging.getLogger(__name__)


class LMWorker:
    """A language model served to async callers, ``slots`` requests at a time."""

    loads_model = True
    """The scheduler counts the run's models (:attr:`~edgepipe.sched.budget.CpuBudget.model_nodes`)."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        max_seq_len: int | None = None,
        queue_size: int = 4,
        session: SessionConfig | None = None,
        prefill_chunk: int = 64,
        max_tokens_per_s: float | None = None,
        slots: int = 1,
        speculate: int = DEFAULT_DRAFTS,
    ) -> None:
        """``slots``: requests decoded together (one KV cache row each); ``speculate``: the
        most drafts a speculative step carries (0: off)."""
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if max_tokens_per_s is not None and max_tokens_per_s <= 0:
            raise ValueError("max_tokens_per_s must be positive (or None: as fast as the model goes)")
        check_packages(model)  # a missing package now, not as the model loads in the running pipeline
        self.max_tokens_per_s = max_tokens_per_s
        self.model = Path(model)
        self.max_seq_len = max_seq_len
        self.queue_size = queue_size
        self.session_config = session
        self.prefill_chunk = prefill_chunk
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self.speculate = speculate
        self.lm: LanguageModel | None = None
        self._tag = Tag(self.model.name, TOKENS)
        """Its thread's name: what the thread does outside the model's runs (sampling, the
        tokenizer) is token decode too, for the CPU ledger; the node's once started."""
        self._thread = DaemonThreadPool(1, f"lm-{self.model.name}", spare_workers=0, tag=self._tag)
        self._admitted = asyncio.Semaphore(queue_size + slots)  # waiting + running
        self._slots = asyncio.Semaphore(slots)
        self.requests = 0
        self.last_stats = GenerationStats()
        self._closed = False
        self._released: Future[None] | None = None
        """The closed model being freed on the old thread (a restart waits for it)."""
        self._under_way: set[asyncio.Event] = set()
        """One per request under way, set by :meth:`cancel` (its pacing wait ends on it)."""

    async def start(self) -> None:
        """Load the model and allocate its cache (on the worker's thread). After
        :meth:`close`, again: a restart (the closed model's memory is freed first)."""
        if self._closed:
            released, self._released = self._released, None
            if released is not None:  # its memory back in the plan before it is reserved again
                await asyncio.wrap_future(released)
            self._thread = DaemonThreadPool(1, f"lm-{self.model.name}", spare_workers=0, tag=self._tag)
            self._closed = False
        if self.lm is None:
            try:  # the node that runs it holds the KV cache in the memory plan
                ctx = current_node()
                owner, priority = ctx.node_id, ctx.priority
            except RuntimeError:
                owner, priority = "", 0
            self._tag.node_id = owner or self.model.name
            loop = asyncio.get_running_loop()
            lm = await loop.run_in_executor(self._thread, self._load, owner)
            if self._closed:  # closed while it loaded (its thread is shut): it goes at once
                lm.close()
                raise LMError("the worker was closed while its model loaded", model=str(self.model))
            self.lm = lm
            # Its steps enter the CPU budget as token decode, at the node's priority.
            lm.runner.session.ticket.set_owner(owner or self.model.name, "lm", priority)

    def tickets(self) -> list[Ticket]:
        """How the model's steps are admitted to the CPU budget (empty before loading)."""
        return [self.lm.runner.session.ticket] if self.lm is not None else []

    def _load(self, owner: str) -> LanguageModel:
        return LanguageModel(self.model, max_seq_len=self.max_seq_len, prefill_chunk=self.prefill_chunk,
                             session=self.session_config, owner=owner, slots=self.slots,
                             speculate=self.speculate)  # fmt: skip

    def close(self) -> None:
        """Stop taking requests; a running one ends at its next token. The model and its KV
        cache are freed (and leave the memory plan) on the worker's thread as soon as no step
        runs there. :meth:`start` loads them again."""
        if self._closed:
            return
        self._closed = True
        lm, self.lm = self.lm, None
        if lm is not None:
            lm.cancel()
            # Queued behind a step under way, which writes into the cache: freed after it.
            self._released = self._thread.submit(lm.close)
        self._thread.shutdown(wait=False)

    async def aclose(self) -> None:
        """:meth:`close`, and wait until the model and its cache are freed (after a step under
        way: its deadline bounds the wait)."""
        self.close()
        released = self._released
        if released is not None:
            await asyncio.wrap_future(released)

    def cancel(self) -> None:
        """End the requests under way at their next step (on the event loop): they stop
        waiting at the CPU gate or for their pace, run no more steps, and their ``generate()``
        ends normally with what it wrote (``last_stats.stop_reason == "cancelled"``). Requests
        waiting their turn are not touched. Nothing under way: nothing happens. (One request
        alone ends when its caller stops iterating.)"""
        if not self._under_way:
            return
        for cancelled in self._under_way:
            cancelled.set()
        lm = self.lm
        if lm is not None:  # else it is loading: the requests end before their first step
            lm.cancel()

    def use_slots(self, slots: int) -> None:
        """Serve ``slots`` requests at once from the next load on (before :meth:`start`, or
        after :meth:`close`): a node that learns how many cameras it has at start."""
        if slots < 1:
            raise ValueError("slots must be at least 1")
        if slots == self.slots:
            return
        if self.lm is not None or self.waiting:
            raise LMError("the worker's slots are set before its model loads", model=str(self.model))
        self.slots = slots
        self._admitted = asyncio.Semaphore(self.queue_size + slots)
        self._slots = asyncio.Semaphore(slots)

    def _check_open(self) -> None:
        if self._closed:
            raise LMError("the worker is closed: no more requests", model=str(self.model))

    @property
    def waiting(self) -> int:
        """Requests admitted and not yet finished (running included)."""
        return self.queue_size + self.slots - self._admitted._value

    async def generate(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
                       overflow: Overflow = "refuse", *, chat: bool = False,
                       system: str | None = None,
                       on_stats: Callable[[GenerationStats], None] | None = None,
                       ) -> AsyncGenerator[str, None]:  # fmt: skip
        """Text pieces as the model produces them. ``prompt`` is text, or token ids.
        ``on_stats`` is given the request's figures when it ends (``last_stats`` is the latest
        request's, whichever that was when several run).

        ``chat=True`` sends a text prompt as the user's turn in the model's chat format, after
        ``system`` (None: the format's default system prompt, if it has one), where the
        model's folder has a known chat template (:mod:`edgepipe.lm.chat`); otherwise, and by
        default, the text goes as written."""
        self._check_open()
        params = params or SamplingParams()
        async with self._admitted, self._slots:
            # Under way from here (no await before it): cancel() ends it, even before its first step.
            cancelled = asyncio.Event()
            self._under_way.add(cancelled)
            try:
                self._check_open()
                await self.start()
            except BaseException:
                self._under_way.discard(cancelled)
                raise
            lm, pool = self.lm, self._thread  # this model's own thread, whatever a restart makes
            assert lm is not None
            loop = asyncio.get_running_loop()
            rate = self.max_tokens_per_s
            try:
                request, stream = await loop.run_in_executor(
                    pool, self._join, lm, prompt, params, overflow, chat, system
                )
            except RuntimeError as exc:  # the pool refused: closed meanwhile
                self._under_way.discard(cancelled)
                self._check_open()
                raise LMError(
                    f"the worker could not start the request: {exc}", model=str(self.model)
                ) from exc
            except BaseException:
                self._under_way.discard(cancelled)
                self.last_stats = lm.stats  # a refused request's own (its prompt, no tokens)
                raise
            self.requests += 1
            t_first = 0.0
            paced = 0.0
            try:
                while True:
                    if cancelled.is_set():
                        request.cancelled = True
                    if rate and t_first and not request.done and not cancelled.is_set():
                        # The next step may not start before the rate allows, counted from the
                        # first token (the prompt's prefill is one burst, not paced).
                        delay = t_first + request.stats.new_tokens / rate - loop.time()
                        if delay > 0:
                            t_sleep = loop.time()
                            with contextlib.suppress(TimeoutError):  # cancel() ends the wait
                                async with asyncio.timeout(delay):
                                    await cancelled.wait()
                            paced += loop.time() - t_sleep
                            if cancelled.is_set():
                                request.cancelled = True
                    try:
                        tokens = await loop.run_in_executor(pool, _advance, lm, request)
                    except RuntimeError as exc:  # the pool refused the step: closed meanwhile
                        self._check_open()
                        raise LMError(
                            f"the worker could not run the step: {exc}", model=str(self.model)
                        ) from exc
                    if tokens:
                        t_first = t_first or loop.time()
                    for token in tokens:
                        piece = stream.push(token)
                        if piece:
                            yield piece
                        if stream.stopped:
                            request.stats.stop_reason = "stop_string"
                            request.cancelled = True
                            return
                    if request.done and not request.out:
                        piece = stream.finish()
                        if stream.stopped:
                            request.stats.stop_reason = "stop_string"
                        if piece:
                            yield piece
                        return
            finally:
                self._under_way.discard(cancelled)
                request.cancelled = True  # a caller that stopped asking ends its request here
                if not request.done:
                    request.stats.stop_reason = request.stats.stop_reason or "cancelled"
                if paced:
                    request.stats.paced_ms = paced * 1000
                if pool is self._thread and not self._closed:
                    # The slot is freed on the worker's thread: a step may be under way there.
                    await asyncio.shield(loop.run_in_executor(pool, lm.decoder.leave, request))
                self.last_stats = request.stats
                if on_stats is not None:
                    on_stats(request.stats)
                # A traceback that keeps this frame (a cancelled caller's) must not keep the
                # model from being freed when the worker closes.
                del lm, request

    @staticmethod
    def _join(lm: LanguageModel, prompt: str | Sequence[int], params: SamplingParams, overflow: Overflow,
              chat: bool, system: str | None) -> tuple[Request, PieceStream]:  # fmt: skip
        ids = lm.prompt_ids(prompt, chat=chat, system=system) if isinstance(prompt, str) else list(prompt)
        lm.begin()
        lm.stats = GenerationStats(prompt_tokens=len(ids))  # what a refused request leaves
        request = lm.decoder.join(ids, params, overflow, lm.stop_ids)
        lm.stats = request.stats
        return request, lm.piece_stream(params)

    async def complete(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
                       overflow: Overflow = "refuse", *, chat: bool = False,
                       system: str | None = None) -> str:  # fmt: skip
        pieces = self.generate(prompt, params, overflow, chat=chat, system=system)
        return "".join([piece async for piece in pieces])


def _advance(lm: LanguageModel, request: Request) -> list[int]:
    """On the worker's thread: the tokens ``request`` has written; none yet, one step for every
    request on the model first (whoever asks first drives the step for all)."""
    tokens = lm.decoder.take(request)
    if not tokens and not request.done:
        lm.decoder.step()
        tokens = lm.decoder.take(request)
    return tokens
