"""A language model beyond the box: :class:`RemoteLM`, with :class:`~edgepipe.lm.LMWorker`'s
``generate()``, on an OpenAI-compatible engine (:mod:`.client`) behind a circuit
(:mod:`.circuit`).

Requests in flight are bounded by the engine's slots: llama-server's ``/props`` says how many
it decodes at once (``total_slots``), otherwise :class:`RemoteEngine`'s ``slots`` (default 1).
A request beyond them waits in a queue of ``queue_size``; beyond that it is refused at once
(:class:`EngineBusy`), for the caller to count, as a lane counts what its policy drops. A
caller with a local model asks :meth:`RemoteLM.takes` first, and sends a request that would
wait (or find the circuit open) to the local model instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgepipe.lm.remote.circuit import EngineCircuit
from edgepipe.lm.remote.client import EngineInfo, OpenAIClient, RemoteStats
from edgepipe.lm.remote.errors import EngineConfigError, EngineError, RequestCancelled
from edgepipe.lm.sampling import SamplingParams
from edgepipe.wire.redact import add_secret, redact_url

log = logging.getLogger(__name__)

API_KEY_ENV = "EDGEPIPE_LM_API_KEY"


@dataclass(frozen=True, slots=True)
class RemoteEngine:
    """Where and how to reach an OpenAI-compatible engine (llama-server, vLLM, Ollama, TGI).

    ``url`` is the API's base (``http://host:8080/v1``). ``model`` is the name the server
    knows the model by (llama-server serves one and ignores it; vLLM and Ollama need it).
    ``api_key`` (never shown) defaults to the ``EDGEPIPE_LM_API_KEY`` environment variable.
    ``slots``: requests the engine decodes at once (None: llama-server's ``/props``, else 1).
    ``images``: send the source's picture with each request (None: where the server declares
    image input, llama-server's ``/props`` ``modalities.vision``), at most ``image_side`` pixels on
    its long side and ``image_bytes`` in all per request.
    """

    url: str
    model: str = ""
    api_key: str | None = field(default=None, repr=False)
    slots: int | None = None
    queue_size: int = 4
    first_token_s: float = 10.0
    request_s: float = 60.0
    connect_s: float = 3.0
    images: bool | None = None
    image_side: int = 512
    image_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        if self.slots is not None and self.slots < 1:
            raise ValueError("slots must be at least 1 (or None: the server's)")
        if self.queue_size < 0:
            raise ValueError("queue_size must be 0 or more")
        if self.image_side < 16 or self.image_bytes < 1024:
            raise ValueError("image_side >= 16 and image_bytes >= 1024, please")
        key = self.key()
        if key:
            add_secret(key)  # never shown, whatever message it ends up in

    @property
    def shown(self) -> str:
        return redact_url(self.url)

    def key(self) -> str | None:
        return self.api_key if self.api_key is not None else os.environ.get(API_KEY_ENV) or None


def remote_engine(model: object) -> RemoteEngine | None:
    """``model`` as a remote engine: a :class:`RemoteEngine`, or a string that is an http(s)
    URL; None for anything else (a local model's folder)."""
    if isinstance(model, RemoteEngine):
        return model
    if isinstance(model, str) and model.startswith(("http://", "https://")):
        return RemoteEngine(model)
    return None


class EngineBusy(EngineError):
    """Every slot busy and the queue full: the request was not sent (counted, not retried)."""

    cause = "saturated"


class RemoteLM:
    """One engine's requests: bounded by its slots, behind its circuit."""

    def __init__(self, engine: RemoteEngine | str, *, clock: Callable[[], float] | None = None) -> None:
        self.engine = engine if isinstance(engine, RemoteEngine) else RemoteEngine(engine)
        e = self.engine
        self.client = OpenAIClient(e.url, model=e.model, api_key=e.key(), connect_s=e.connect_s,
                                   first_token_s=e.first_token_s, request_s=e.request_s)  # fmt: skip
        self.circuit = EngineCircuit(clock=clock) if clock is not None else EngineCircuit()
        self.info = EngineInfo()
        self.slots = e.slots or 1
        self._slots = asyncio.Semaphore(self.slots)
        self.running = 0
        self.waiting = 0
        self.requests = 0
        self.last_stats = RemoteStats()
        self._started = False
        self._probed = False
        """The server said what it is (one away at start is asked after its first answer)."""

    @property
    def name(self) -> str:
        return self.engine.shown

    @property
    def vision(self) -> bool:
        """Whether requests carry pictures: as the engine config says, else as the server does."""
        if self.engine.images is not None:
            return self.engine.images
        return bool(self.info.vision)

    async def start(self) -> None:
        """Ask the server what it is (slots, images). A server that is not there is a
        warning, never an error: cameras keep running, and the circuit retries it."""
        if self._started:
            return
        self._started = True
        try:
            await self._probe()
        except EngineError as exc:
            self.circuit.failed(exc)
            refused = isinstance(exc, EngineConfigError)
            then = (
                "no request goes to it in this run" if refused else "requests go elsewhere until it answers"
            )
            log.warning("%s; %s", exc, then)
            return

    async def _probe(self) -> None:
        """``/props`` (or ``/models``): the slots and images; once it has answered."""
        self.info = await self.client.probe()
        self._probed = True
        if self.engine.slots is None and self.info.slots and self.info.slots != self.slots:
            self._resize(self.info.slots)
        log.info("engine %s: %s, %d slot(s)%s", self.name, self.info.kind, self.slots,
                 ", takes images" if self.vision else "")  # fmt: skip

    def _resize(self, slots: int) -> None:
        if self.running or self.waiting:
            return  # requests hold the old semaphore: keep it
        self.slots = slots
        self._slots = asyncio.Semaphore(slots)

    async def close(self) -> None:
        await self.client.close()
        self._started = False

    def cancel(self) -> None:
        """End the requests under way now (their answers end as written so far, ``stop_reason``
        ``cancelled``); the circuit takes no note of them."""
        self.client.abort()

    def takes(self, *, wait: bool) -> bool:
        """Whether a request would go to the engine now: its circuit lets it, and a slot is
        free (``wait``: or the queue has room). An open circuit past its backoff lets this one
        request try it."""
        if self.running >= self.slots and (not wait or self.waiting >= self.engine.queue_size):
            return False
        return self.circuit.allows()

    async def generate(self, prompt: str, params: SamplingParams, *, chat: bool = True,
                       system: str | None = None, images: Sequence[str] = (),
                       on_stats: Callable[[RemoteStats], None] | None = None,
                       ) -> AsyncGenerator[str, None]:  # fmt: skip
        """The engine's answer in text pieces. Raises :class:`EngineError` (the circuit has
        taken it into account), :class:`EngineBusy` with the slots and queue full."""
        if self.running >= self.slots and self.waiting >= self.engine.queue_size:
            raise EngineBusy(f"engine {self.name}: {self.slots} slot(s) busy and {self.waiting} waiting",
                             url=self.engine.url)  # fmt: skip
        stats = RemoteStats()
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        verdict = False
        try:
            self.requests += 1
            messages = chat_messages(prompt, chat=chat, system=system, images=images)
            async for piece in self.client.stream(messages, params, stats):
                yield piece
            verdict = True
            self.circuit.succeeded()
            if not self._probed:  # it was away at start: its slots and images now
                with contextlib.suppress(EngineError):
                    await self._probe()
        except RequestCancelled:  # ended on purpose (the run stops): it ends as written so far
            stats.stop_reason = "cancelled"
        except EngineError as exc:
            verdict = True
            self.circuit.failed(exc)
            raise
        finally:
            if not verdict:  # the caller stopped early: no word on the engine
                self.circuit.abandoned()
                stats.stop_reason = stats.stop_reason or "cancelled"
            self.running -= 1
            self._slots.release()
            self.last_stats = stats
            if on_stats is not None:
                on_stats(stats)


def chat_messages(
    prompt: str, *, chat: bool, system: str | None, images: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The request's messages: the prompt as the user's turn (after ``system``), with the
    pictures as ``image_url`` parts. ``chat=False`` has no system turn (a base model's text;
    the server still applies its template)."""
    messages: list[dict[str, Any]] = []
    if chat and system:
        messages.append({"role": "system", "content": system})
    if images:
        parts: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
        parts += [{"type": "image_url", "image_url": {"url": uri}} for uri in images]
        messages.append({"role": "user", "content": parts})
    else:
        messages.append({"role": "user", "content": prompt})
    return messages


__all__ = ["API_KEY_ENV", "EngineBusy", "RemoteEngine", "RemoteLM", "chat_messages", "remote_engine"]
