"""The ``Describe`` node: a window of detections and source state -> a prompt -> text, streamed.

::

    p.stage("describe", Describe(model, template="Seen in the last {seconds:.0f} s: {summary}. "
                                                 "Camera: {state}. In one sentence, the scene:"),
            inputs=faces, policy="latest", queue_size=4)

It takes :class:`~edgepipe.vision.Detections` (and any other items: they are counted by kind)
into a :class:`~edgepipe.lm.scene.SceneWindow`. Every ``every_s`` seconds, input or not (a
camera that went quiet is worth a report), it renders the template over the last ``window_s``
seconds and streams the model's answer: one ``Message("token", {...})`` per text piece and a
final ``Message("event", {...})`` with the whole text, the prompt, each source's state (the
sources upstream: ``current_node().sources``, given to the window at start) and the
request's timings. The first report comes with the first input; when the input ends, what
came after the latest report gets one last, and the stage ends. When the run stops (SIGINT,
SIGTERM, ``--duration``) no new report starts, and the one being written ends at its next token:
its event still comes, with the text written so far and ``stop_reason`` ``cancelled``, so that
every token sent has its description and the drain takes one step, not a whole answer (at a
slow pace, many seconds). Input keeps being read while the model writes (and after a stop,
to its end), so the window stays current; declare a ``latest`` inbox all the same, so a
slow consumer never holds back the detector. The template may use ``{seconds}``,
``{summary}``, ``{frames}``, ``{counts}``, ``{sources}`` and ``{state}``.

The rendered template is the user's turn in the model's chat format (``chat=True``, the
default; ``system`` replaces the format's default system prompt), where the model's folder has
one (see :mod:`edgepipe.lm.chat`); ``chat=False`` sends it as written, for a base model.

``model`` may also be an OpenAI-compatible engine beyond the box (llama-server, vLLM,
Ollama, TGI): its URL (``"http://host:8080/v1"``) or a :class:`~edgepipe.lm.remote.RemoteEngine`
with its model name, key, slots and deadlines. ``fallback`` then names a local model folder
that writes while the engine cannot (:mod:`edgepipe.lm.remote.engines`); each description says which
engine wrote it (``engine``), and one nobody could write is an ``event`` of its own
(``what: description_skipped``, with its ``cause``), counted in ``--stats``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

from edgepipe.core.context import current_node
from edgepipe.infer.session import SessionConfig
from edgepipe.lm.batch import DEFAULT_DRAFTS
from edgepipe.lm.remote.describing import EngineParts
from edgepipe.lm.remote.engine import RemoteEngine, RemoteLM, remote_engine
from edgepipe.lm.remote.engines import Engines, Written
from edgepipe.lm.remote.images import Thumbnail
from edgepipe.lm.reservations import plan_language_model
from edgepipe.lm.sampling import SamplingParams
from edgepipe.lm.scene import FIELDS, SceneWindow
from edgepipe.lm.stats import GenerationStats
from edgepipe.lm.worker import LMWorker
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.memory_plan import PlanNode
from edgepipe.sched.knobs import PaceKnob
from edgepipe.wire.results import Message

DEFAULT_TEMPLATE = "Camera report for the last {seconds:.0f} seconds: {summary}.\nDescription:"


class Describe(EngineParts):
    """A stream stage that writes about what the detectors saw and how the sources are."""

    priority = "low"
    """The first work the governor slows when the CPU is short (see :mod:`edgepipe.sched`)."""
    loads_model = True
    """The scheduler counts the run's models (:attr:`~edgepipe.sched.budget.CpuBudget.model_nodes`)."""

    def __init__(
        self,
        model: str | Path | RemoteEngine,
        *,
        fallback: str | Path | None = None,
        template: str = DEFAULT_TEMPLATE,
        window_s: float = 10.0,
        every_s: float = 10.0,
        stale_s: float = 3.0,
        forget_s: float = 300.0,
        params: SamplingParams | None = None,
        max_seq_len: int | None = None,
        session: SessionConfig | None = None,
        max_tokens_per_s: float | None = None,
        chat: bool = True,
        system: str | None = None,
        slots: int | None = None,
        per_source: bool | None = None,
        speculate: int = DEFAULT_DRAFTS,
    ) -> None:
        """``max_tokens_per_s`` paces the model (see :class:`~edgepipe.lm.LMWorker`); ``chat``
        and ``system``: the prompt as the user's turn of a chat model (see
        :meth:`~edgepipe.lm.LMWorker.generate`); ``per_source``: one description per source
        upstream, written at once (default: when there are several); ``slots``: requests the
        model decodes together, one KV cache row each (default: one per source described);
        ``speculate``: drafts a speculative step carries (0: off); ``fallback``: a local model
        folder for a remote ``model``."""
        if every_s <= 0:
            raise ValueError("every_s must be positive")
        self.template = template
        self.every_s = every_s
        self.chat = chat
        self.system = system
        self.window = SceneWindow(window_s, stale_s=stale_s, forget_s=forget_s)
        self.params = params or SamplingParams(max_new_tokens=48)
        if slots is not None and slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self.per_source = per_source
        self._each = bool(per_source)
        self._gauges: dict[str, Any] = {}
        """The node's gauges (``--stats``): slots and the speculative steps' kept drafts."""
        remote = remote_engine(model)
        if remote is None and fallback is not None:
            raise ValueError("fallback is the local model beside a remote one: give model a URL")
        local = fallback if remote is not None else model
        assert not isinstance(local, RemoteEngine)
        self.remote = RemoteLM(remote) if remote is not None else None
        self.worker = None if local is None else LMWorker(
            local, max_seq_len=max_seq_len, session=session, max_tokens_per_s=max_tokens_per_s,
            slots=slots or 1, speculate=speculate,
        )  # fmt: skip
        self.loads_model = self.worker is not None
        self.engines = Engines(self.remote, self.worker)
        self._thumbs: dict[str, Thumbnail] = {}
        """Each source's latest small picture, for an engine that takes images."""
        self.images_skipped = 0
        """Pictures left out of a request: over its byte budget even at the coarsest JPEG."""
        self._told_state = ("closed", "")
        """The engine's circuit as last said (an ``engine_state`` message goes out when it changes)."""
        self._next_t = 0.0
        self.requests = 0
        try:  # fail on a bad template now, not ten seconds into the run
            self.template.format(seconds=1.0, summary="", frames=0, counts={}, sources="", state="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"template: {exc!r}; it may use {', '.join(FIELDS)}") from exc

    def _fit(self, sources: int) -> None:
        """Per source or not, and the slots, for ``sources`` cameras upstream."""
        self._each = self.per_source if self.per_source is not None else sources > 1
        if self.worker is not None:
            self.worker.use_slots(self.slots or (max(1, sources) if self._each else 1))

    async def start(self) -> None:
        try:
            ctx = current_node()
        except RuntimeError:
            ctx = None
        if ctx is not None:
            self.window.sources = ctx.sources
        if self.worker is None or self.worker.lm is None:
            self._fit(len(self.window.sources))
        if self.remote is not None:
            await self.remote.start()  # a server not there is a warning: the circuit retries it
        if self.worker is not None:
            await self.worker.start()
        if ctx is not None:
            ctx.gauges["model"] = self.remote.name if self.remote is not None else self.worker_name
            self._gauges = ctx.gauges
            self._show()

    async def stop(self) -> None:
        """Close the worker; returns once the model and its KV cache are freed (out of the
        memory plan). :meth:`start` loads them again: a restart."""
        if self.remote is not None:
            await self.remote.close()
        if self.worker is not None:
            await self.worker.aclose()

    def governor_knobs(self, node_id: str, priority: int) -> list[PaceKnob]:
        """The local model's pace: the share of time its steps may take (a remote engine's
        time is not the box's)."""
        return [PaceKnob(node_id, priority, self.worker.tickets())] if self.worker is not None else []

    def plan_memory(self, plan: MemoryPlan, node: PlanNode) -> None:
        """What :meth:`start` would reserve: the model's weights and KV cache (see
        :mod:`edgepipe.lm.reservations`)."""
        worker = self.worker
        if worker is None:
            return  # a remote engine's memory is not the box's
        if worker.lm is None:
            self._fit(len(node.sources))
        plan_language_model(plan, node, model=worker.model, max_seq_len=worker.max_seq_len,
                            session=worker.session_config, slots=worker.slots)  # fmt: skip

    def prompt(self, now: float | None = None) -> str:
        """The template rendered over the window ending ``now``."""
        return self.template.format(**self.window.fields(now))

    async def process(self, items: AsyncIterator[Any]) -> AsyncIterator[Message]:
        wake = asyncio.Event()
        ended = False
        failure: Exception | None = None
        observed = 0  # items taken in so far
        described = 0  # items taken in when the latest report began
        self._next_t = time.monotonic() + self.every_s
        try:
            stopping = current_node().stopping
        except RuntimeError:  # driven directly, not by a runtime: it never stops early
            stopping = asyncio.Event()

        async def cut_short() -> None:
            await stopping.wait()
            self.engines.cancel()  # the report being written ends at its next token
            wake.set()

        async def read() -> None:
            # Never raises: a failing child would cancel this generator's task wherever it is,
            # even suspended at a yield in the consumer's code. Its error is raised there instead.
            nonlocal ended, failure, observed
            try:
                async for item in items:
                    now = time.monotonic()
                    self.observe(item, now)
                    observed += 1
                    if self.requests == 0 and self._next_t > now:
                        self._next_t = now  # the first report comes with the first input
                        wake.set()
            except Exception as exc:
                failure = exc
            finally:
                close = getattr(items, "aclose", None)
                if close is not None:  # its held input is released now, not when collected
                    try:
                        await close()
                    except Exception as exc:
                        failure = failure or exc
                ended = True
                wake.set()

        error: Exception | None = None
        try:
            async with asyncio.TaskGroup() as group:
                reader = group.create_task(read())
                stop_watch = group.create_task(cut_short())
                try:
                    while True:
                        stopped = stopping.is_set()
                        delay = self._next_t - time.monotonic()
                        if (delay > 0 or stopped) and not ended:
                            with contextlib.suppress(TimeoutError):
                                async with asyncio.timeout(None if stopped else delay):
                                    await wake.wait()
                            wake.clear()
                        if failure is not None:
                            raise failure
                        if ended and (observed == described or stopping.is_set()):
                            return  # the input is over and all of it was described (or the run stops)
                        if stopping.is_set():
                            continue  # no new report: the input is read to its end
                        now = time.monotonic()
                        # Once the input is over, what came after the latest report gets one
                        # more (the end of a file); then the stage ends.
                        if ended or now >= self._next_t:
                            described = observed
                            self._next_t = now + self.every_s
                            async with contextlib.aclosing(self._describe_all(group, now)) as messages:
                                async for message in messages:
                                    yield message
                except Exception as exc:  # raised below, outside the group, cause chain intact
                    error = exc
                    reader.cancel()
                finally:
                    stop_watch.cancel()
        except BaseExceptionGroup as group:  # GeneratorExit or KeyboardInterrupt at a yield
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        if error is not None:
            raise error

    async def _describe_all(self, group: asyncio.TaskGroup, now: float) -> AsyncGenerator[Message, None]:
        """One description of everything, or one per source written at once (their messages
        interleaved as the model writes them: each carries its ``source``)."""
        sources = [s.source for s in self.window.source_states(now)] if self._each else []
        if len(sources) < 2:
            async with contextlib.aclosing(self._describe(now, sources[0] if sources else None)) as messages:
                async for message in messages:
                    yield message
            return
        queue: asyncio.Queue[Message | None] = asyncio.Queue(maxsize=4 * len(sources))
        failures: list[Exception] = []

        async def one(source: str) -> None:
            try:
                async with contextlib.aclosing(self._describe(now, source)) as messages:
                    async for message in messages:
                        await queue.put(message)
            except Exception as exc:  # raised in the consumer, after the others end
                failures.append(exc)
            await queue.put(None)  # not reached when cancelled: nobody reads any more

        tasks = [group.create_task(one(source)) for source in sources]
        try:
            ended = 0
            while ended < len(tasks):
                got = await queue.get()
                if got is None:
                    ended += 1
                else:
                    yield got
        finally:
            for task in tasks:
                task.cancel()
        if failures:
            raise failures[0]

    async def _describe(self, now: float, source: str | None = None) -> AsyncGenerator[Message, None]:
        prompt = self.template.format(**self.window.fields(now, source))
        states = {s.source: s.to_dict() for s in self.window.source_states(now) if source in (None, s.source)}
        self.requests += 1
        request = self.requests
        pieces: list[str] = []
        own = {"request": request} | ({"source": source} if source is not None else {})
        written = Written()
        images = await self._pictures(source, now)
        async with contextlib.aclosing(
            self.engines.write(
                prompt, self.params, written, chat=self.chat, system=self.system, images=images
            )
        ) as stream:
            async for piece in stream:
                pieces.append(piece)
                yield Message("token", {**own, "text": piece})
        self._figures(written)
        state = self._engine_state()
        if state is not None:
            yield state
        if not written.engine:  # nobody could write it: said, never silent
            yield Message("event", {"what": "description_skipped", **own, "cause": written.skipped,
                                    "error": written.error, "prompt": prompt, "sources": states})  # fmt: skip
            return
        stats = written.stats or GenerationStats()
        extra = {"engine_error": written.error} if written.error else {}
        yield Message("event", {"what": "description", **own, "text": "".join(pieces), "prompt": prompt,
                                "sources": states, "engine": written.engine, **extra,
                                **stats.to_dict()})  # fmt: skip
