"""A small OpenAI-compatible server whose answers a test scripts: for the edge cases a real
llama-server does not produce on demand (pings only, a cut stream, an HTML page, 429s)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def chunk(text: str | None = None, finish: str | None = None, **extra: Any) -> bytes:
    delta = {} if text is None else {"content": text}
    body = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body | extra).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def status(code: int, body: object, headers: dict[str, str] | None = None) -> Handler:
    """A handler that answers ``body`` as JSON with HTTP ``code``."""

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=code, headers=headers)

    return answer


async def sse(request: web.Request, *parts: bytes | float) -> web.StreamResponse:
    """A 200 event stream of ``parts``: bytes are written, numbers are pauses in seconds."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for part in parts:
        if isinstance(part, bytes):
            await response.write(part)
        else:
            await asyncio.sleep(part)
    return response


class FakeEngine:
    def __init__(self) -> None:
        self.chat: Handler = lambda r: sse(r, chunk("Hello"), chunk(" there", "stop"), DONE)
        self.props: dict[str, Any] | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.url = ""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        self.headers.append(dict(request.headers))
        return await self.chat(request)

    async def _props(self, request: web.Request) -> web.StreamResponse:
        if self.props is None:
            return web.json_response({"error": {"message": "File Not Found"}}, status=404)
        return web.json_response(self.props)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})


@asynccontextmanager
async def fake_engine() -> AsyncIterator[FakeEngine]:
    engine = FakeEngine()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine._chat)
    app.router.add_get("/props", engine._props)
    app.router.add_get("/v1/models", engine._models)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    engine.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield engine
    finally:
        await runner.cleanup()
