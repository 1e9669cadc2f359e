"""An OpenAI-compatible engine over HTTP: ``/props`` (or ``/models``) once, then chat
completions streamed over server-sent events, each under two deadlines.

Spoken to: llama.cpp's ``llama-server``, vLLM, Ollama's ``/v1``, TGI, and any server of the
OpenAI chat-completions API. ``url`` is the API's base, as those servers document it
(``http://host:8080/v1``); ``/chat/completions`` is added to it. llama-server's ``/props`` sits
beside ``/v1``, at the server's root: it says how many requests the server decodes at once
(``total_slots``) and whether it takes images (``modalities.vision``).

A request is one ``POST`` with ``"stream": true``. The first deadline (``first_token_s``)
runs from the request to its first text: a server that only pings (``:`` comments while a long
prompt is processed, or while it hangs) is cut there. The second (``request_s``) bounds the
whole request. Every way it can fail is an :mod:`~edgepipe.lm.remote.errors` class, by what
the caller should do about it.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from edgepipe.lm.remote.chunks import Chunk, ChunkError, chunk_of, read_chunk
from edgepipe.lm.remote.errors import (
    EngineConfigError,
    EngineError,
    EngineRequestError,
    EngineUnavailable,
    RequestCancelled,
)
from edgepipe.lm.remote.sse import SseError, SseParser
from edgepipe.lm.sampling import SamplingParams
from edgepipe.lm.stats import GenerationStats
from edgepipe.wire.redact import redact_url

READ_BYTES = 1 << 16
LOADING = "loading model"
"""llama-server's 503 message while it loads (and Ollama's, TGI's, in their words)."""


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What the server says of itself (``/props``); None where it says nothing."""

    slots: int | None = None
    vision: bool | None = None
    context: int | None = None
    model: str | None = None
    kind: str = "openai"
    """``llama.cpp`` when ``/props`` answered, else ``openai``."""


@dataclass(slots=True)
class RemoteStats(GenerationStats):
    """A remote request's figures: measured here (TTFT, the time between text chunks) and,
    where the server sends them, its own (``usage``, llama-server's ``timings``)."""

    server: dict[str, Any] = field(default_factory=dict)
    """The server's ``timings`` as sent (llama-server), else empty."""

    def to_dict(self) -> dict[str, object]:
        figures = GenerationStats.to_dict(self)
        if self.server:
            figures["server_timings"] = self.server
        return figures


def api_root(url: str) -> str:
    """The server's root from the API's base: ``http://h:8080/v1`` -> ``http://h:8080``."""
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


class OpenAIClient:
    """One engine's HTTP client; :meth:`close` it (a node's ``stop``)."""

    def __init__(self, url: str, *, model: str = "", api_key: str | None = None,
                 connect_s: float = 3.0, first_token_s: float = 10.0,
                 request_s: float = 60.0) -> None:  # fmt: skip
        if not url.startswith(("http://", "https://")):
            raise ValueError(
                f"engine {redact_url(url)}: give an http:// or https:// URL, as http://host:8080/v1"
            )
        if min(connect_s, first_token_s, request_s) <= 0:
            raise ValueError("connect_s, first_token_s and request_s must be positive")
        self.url = url.rstrip("/")
        self.shown = redact_url(self.url)
        self.model = model
        self._api_key = api_key
        self.connect_s = connect_s
        self.first_token_s = first_token_s
        self.request_s = request_s
        self._session: aiohttp.ClientSession | None = None
        self._under_way: set[asyncio.Timeout] = set()
        """The deadlines of the requests being streamed: :meth:`abort` brings them to now."""
        self._aborts = 0

    def abort(self) -> None:
        """End every request under way now, wherever it waits (connecting, queued at the
        server, between two pieces): each raises :class:`RequestCancelled`. A run that stops."""
        self._aborts += 1
        now = asyncio.get_running_loop().time()
        for deadline in self._under_way:
            deadline.reschedule(now)

    def __repr__(self) -> str:  # never the key
        return f"OpenAIClient({self.shown!r}, model={self.model!r})"

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Accept": "text/event-stream, application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            connector = aiohttp.TCPConnector(limit=0, force_close=False)
            self._session = aiohttp.ClientSession(headers=headers, connector=connector, trust_env=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def probe(self) -> EngineInfo:
        """What the server says of itself: llama-server's ``/props``, else ``/models``.
        Raises :class:`EngineError` (unavailable: not up yet; config: wrong URL or key)."""
        timeout = aiohttp.ClientTimeout(total=self.connect_s + self.first_token_s,
                                        sock_connect=self.connect_s)  # fmt: skip
        http = self._http()
        try:
            async with http.get(f"{api_root(self.url)}/props", timeout=timeout) as response:
                if response.status == 200 and _is_json(response):
                    return _props(await response.json(content_type=None))
                if response.status != 404:  # 404: not llama-server; ask the API itself
                    await self._refuse(response)
            async with http.get(f"{self.url}/models", timeout=timeout) as response:
                if response.status == 200 and _is_json(response):
                    return EngineInfo(model=_first_model(await response.json(content_type=None)))
                await self._refuse(response)
        except EngineError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            raise self._unreachable(exc) from exc
        raise AssertionError("unreachable")  # _refuse always raises

    async def stream(self, messages: list[dict[str, Any]], params: SamplingParams,
                     stats: RemoteStats) -> AsyncGenerator[str, None]:  # fmt: skip
        """The answer's text pieces as the server streams them; ``stats`` filled meanwhile.
        Raises :class:`EngineError`."""
        body = self.body(messages, params)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        first_deadline = t0 + self.first_token_s
        last_deadline = t0 + self.request_s
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_s)
        http = self._http()
        parser = SseParser()
        aborts = self._aborts
        deadline: asyncio.Timeout | None = None
        try:
            async with asyncio.timeout_at(min(first_deadline, last_deadline)) as deadline:
                self._under_way.add(deadline)
                async with http.post(f"{self.url}/chat/completions", json=body, timeout=timeout) as response:
                    if response.status != 200:
                        await self._refuse(response)
                    if not _is_event_stream(response):
                        if _is_json(response):  # a server that answered whole: one piece
                            text = _whole(await response.json(content_type=None), stats)
                            stats.ttft_ms = (loop.time() - t0) * 1000
                            if text:
                                yield text
                            return
                        await self._refuse(response)
                    t_last = 0.0
                    chunks = 0
                    done = False
                    finish: str | None = None
                    while not done:
                        data = await response.content.readany()
                        if not data:
                            break
                        for event in parser.feed(data):
                            chunk = read_chunk(event)
                            if chunk.done:
                                done = True
                                break
                            _figures(chunk, stats)
                            finish = chunk.finish_reason or finish
                            if chunk.text:
                                now = loop.time()
                                if not chunks:
                                    stats.ttft_ms = (now - t0) * 1000
                                    deadline.reschedule(last_deadline)  # the first token came
                                else:
                                    stats.token_ms.append((now - t_last) * 1000)
                                t_last = now
                                chunks += 1
                                yield chunk.text
                    cut = parser.close()
                    if not done and (finish is None or cut):
                        raise EngineUnavailable(
                            f"engine {self.shown}: the stream ended without [DONE] after {chunks} pieces "
                            "(the server stopped or the connection was cut)",
                            url=self.url, cause="cut_off",
                        )  # fmt: skip
                    stats.stop_reason = _stop_reason(finish)
                    _count(stats, chunks)
        except TimeoutError as exc:
            if self._aborts != aborts:
                raise RequestCancelled("cancelled", url=self.url) from exc
            first = not stats.ttft_ms
            waited = self.first_token_s if first else self.request_s
            pings = f" ({parser.pings} pings meanwhile)" if first and parser.pings else ""
            raise EngineUnavailable(
                f"engine {self.shown}: no {'first token' if first else 'end'} within {waited:g} s{pings}",
                url=self.url, cause="first_token" if first else "timeout",
            ) from exc  # fmt: skip
        except ChunkError as exc:
            cause = "stream_error" if exc.server_error else "not_an_api"
            raise EngineUnavailable(f"engine {self.shown}: {exc}", url=self.url, cause=cause) from exc
        except SseError as exc:
            raise EngineConfigError(f"engine {self.shown}: {exc}", url=self.url, cause="not_an_api") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise self._unreachable(exc, streaming=bool(stats.ttft_ms)) from exc
        finally:
            if deadline is not None:
                self._under_way.discard(deadline)

    def body(self, messages: list[dict[str, Any]], params: SamplingParams) -> dict[str, Any]:
        """The request's JSON body (:meth:`stream` posts it)."""
        body: dict[str, Any] = {
            "model": self.model or "default",
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.top_k:
            body["top_k"] = params.top_k  # llama-server, vLLM; others ignore it
        if params.repetition_penalty != 1.0:
            body["repeat_penalty"] = params.repetition_penalty
        if params.stop_strings:
            body["stop"] = list(params.stop_strings)[:4]  # OpenAI's limit
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    async def _refuse(self, response: aiohttp.ClientResponse) -> None:
        """Raise what a response other than a stream means."""
        status = response.status
        text = (await response.text(errors="replace"))[:2000]
        message = _error_message(text)
        where = f"engine {self.shown}: HTTP {status}"
        if status == 200 or "html" in response.headers.get("Content-Type", "").lower():
            raise EngineConfigError(
                f"engine {self.shown}: answers {response.headers.get('Content-Type') or 'something'}, not an "
                "OpenAI-compatible API; give the API's base URL, as http://host:8080/v1",
                url=self.url, cause="not_an_api",
            )  # fmt: skip
        if status in (401, 403):
            raise EngineConfigError(f"{where} ({message}): check the API key (EDGEPIPE_LM_API_KEY or the "
                                    "params file)", url=self.url, cause="unauthorized")  # fmt: skip
        if status == 404:
            raise EngineConfigError(f"{where} ({message}): check the URL (the API's base, as "
                                    f"http://host:8080/v1) and the model name {self.model!r}",
                                    url=self.url, cause="not_found")  # fmt: skip
        if status in (429, 503) or status >= 500:
            loading = LOADING in message.lower()
            wait = retry_after(response.headers.get("Retry-After"))
            raise EngineUnavailable(f"{where} ({message})", url=self.url, retry_after_s=wait,
                                    cause="loading" if loading else f"http_{status}")  # fmt: skip
        cause = "context" if "context" in message.lower() else "bad_request"
        raise EngineRequestError(f"{where} ({message})", url=self.url, cause=cause)

    def _unreachable(self, exc: BaseException, *, streaming: bool = False) -> EngineUnavailable:
        if isinstance(exc, TimeoutError):
            return EngineUnavailable(f"engine {self.shown}: no answer within {self.connect_s:g} s",
                                     url=self.url, cause="timeout")  # fmt: skip
        if streaming or isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
            return EngineUnavailable(f"engine {self.shown}: the connection was cut ({type(exc).__name__})",
                                     url=self.url, cause="cut_off")  # fmt: skip
        return EngineUnavailable(f"engine {self.shown}: cannot connect ({_reason(exc)})", url=self.url,
                                 cause="refused")  # fmt: skip


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header: a number of seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _is_json(response: aiohttp.ClientResponse) -> bool:
    return "json" in response.headers.get("Content-Type", "").lower()


def _is_event_stream(response: aiohttp.ClientResponse) -> bool:
    return "text/event-stream" in response.headers.get("Content-Type", "").lower()


def _error_message(text: str) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:160] or "no body"
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)[:300]
    return str(error)[:300]


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "os_error", None) or exc.__cause__ or exc
    return getattr(inner, "strerror", None) or str(inner) or type(inner).__name__


def _props(body: Any) -> EngineInfo:
    if not isinstance(body, dict):
        return EngineInfo(kind="llama.cpp")
    slots = body.get("total_slots")
    modalities = body.get("modalities")
    settings = body.get("default_generation_settings")
    context = settings.get("n_ctx") if isinstance(settings, dict) else None
    return EngineInfo(
        slots=slots if isinstance(slots, int) and slots > 0 else None,
        vision=bool(modalities.get("vision")) if isinstance(modalities, dict) else None,
        context=context if isinstance(context, int) else None,
        model=body.get("model_alias") if isinstance(body.get("model_alias"), str) else None,
        kind="llama.cpp",
    )


def _first_model(body: Any) -> str | None:
    data = body.get("data") if isinstance(body, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        name = data[0].get("id")
        return name if isinstance(name, str) else None
    return None


def _figures(chunk: Chunk, stats: RemoteStats) -> None:
    if chunk.usage:
        prompt = chunk.usage.get("prompt_tokens")
        written = chunk.usage.get("completion_tokens")
        if isinstance(prompt, int):
            stats.prompt_tokens = prompt
        if isinstance(written, int):
            stats.new_tokens = written
    if chunk.timings:
        stats.server = chunk.timings
        prompt_n, predicted_n = chunk.timings.get("prompt_n"), chunk.timings.get("predicted_n")
        prompt_ms = chunk.timings.get("prompt_ms")
        if isinstance(prompt_n, int) and not stats.prompt_tokens:
            stats.prompt_tokens = prompt_n
        if isinstance(predicted_n, int) and not stats.new_tokens:
            stats.new_tokens = predicted_n
        if isinstance(prompt_ms, int | float):
            stats.prefill_ms = float(prompt_ms)


def _count(stats: RemoteStats, chunks: int) -> None:
    """Tokens from the server's figures where it sent them, else one per text chunk; the
    time between chunks spread over the tokens they carried (vLLM may send several a chunk)."""
    if not stats.new_tokens:
        stats.new_tokens = chunks
    if chunks > 1 and stats.new_tokens > chunks:
        scale = (chunks - 1) / (stats.new_tokens - 1)
        stats.token_ms[:] = [ms * scale for ms in stats.token_ms]


def _whole(body: Any, stats: RemoteStats) -> str:
    chunk = chunk_of(body)
    _figures(chunk, stats)
    stats.stop_reason = _stop_reason(chunk.finish_reason)
    stats.new_tokens = stats.new_tokens or (1 if chunk.text else 0)
    return chunk.text


def _stop_reason(finish: str | None) -> str:
    """The local model's words for the server's ``finish_reason``."""
    return {"stop": "stop_token", "length": "max_new_tokens", None: "stop_token"}.get(finish, finish or "")


__all__ = ["EngineInfo", "OpenAIClient", "RemoteStats", "api_root", "retry_after"]
