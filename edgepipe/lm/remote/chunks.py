"""One streamed chat-completion event, read: its text, its end, its figures, or its error.

What OpenAI-compatible servers send (llama-server, vLLM, Ollama's ``/v1``, TGI):

- ``data: {"choices": [{"delta": {"content": "…"}, "finish_reason": null}], …}``: text. The
  first chunk may carry only ``"role"``; a ``null`` content is no text.
- ``finish_reason`` ``stop`` or ``length`` (or ``tool_calls``, ``content_filter``) on the last
  choice chunk.
- ``"choices": []`` with ``"usage"``: the token counts (``stream_options.include_usage``); some
  servers send usage on the last choice chunk instead, or never.
- ``"timings"`` (llama-server): ``prompt_n``, ``prompt_ms``, ``predicted_n``, ``predicted_ms``
  and their rates, on the last chunk.
- ``data: [DONE]``: the end (a stream that ends without it was cut off).
- ``data: {"error": {…}}`` (llama-server, vLLM), or an ``event: error`` (Anthropic-style): a
  failure after the HTTP 200.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from edgepipe.lm.remote.sse import SseEvent

DONE = "[DONE]"


class ChunkError(ValueError):
    """An event that says the request failed, or that is not a chat-completion chunk."""

    def __init__(self, message: str, *, server_error: bool) -> None:
        self.server_error = server_error
        """The server reported an error (else: it sent something that is not a chunk)."""
        super().__init__(message)


@dataclass(slots=True)
class Chunk:
    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    done: bool = False
    """``[DONE]``: nothing follows."""


def read_chunk(event: SseEvent) -> Chunk:
    """The chunk ``event`` carries. Raises :class:`ChunkError`."""
    data = event.data
    if data.strip() == DONE:
        return Chunk(done=True)
    try:
        body = json.loads(data)
    except ValueError:
        if event.event == "error":
            raise ChunkError(f"the server reported an error in the stream: {data[:200]}",
                             server_error=True) from None  # fmt: skip
        raise ChunkError(f"an event that is not JSON: {data[:80]!r}", server_error=False) from None
    return chunk_of(body, failed=event.event == "error")


def chunk_of(body: Any, *, failed: bool = False) -> Chunk:
    """The chunk in a parsed event (or a whole, unstreamed answer). Raises :class:`ChunkError`."""
    if not isinstance(body, dict):
        raise ChunkError(f"an event that is not a JSON object: {str(body)[:80]!r}", server_error=False)
    error = body.get("error")
    if error is not None or failed:
        message = _message(error or body)
        raise ChunkError(f"the server reported an error in the stream: {message}", server_error=True)
    chunk = Chunk()
    usage = body.get("usage")
    if isinstance(usage, dict):
        chunk.usage = usage
    timings = body.get("timings")
    if isinstance(timings, dict):
        chunk.timings = timings
    choices = body.get("choices")
    if not isinstance(choices, list):
        if chunk.usage is None and chunk.timings is None:
            raise ChunkError(f"an event with no choices: {str(body)[:80]!r}", server_error=False)
        return chunk
    for choice in choices:  # one choice asked for (n=1); a server may still send an empty list
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") or choice.get("message") or {}
        content = delta.get("content") if isinstance(delta, dict) else None
        if content is None and "text" in choice:  # /v1/completions' shape
            content = choice["text"]
        if isinstance(content, str):
            chunk.text += content
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            chunk.finish_reason = reason
    return chunk


def _message(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message") or error.get("error") or error
        kind = error.get("type") or error.get("code")
        return f"{message} ({kind})" if kind else str(message)
    return str(error)[:200]


__all__ = ["DONE", "Chunk", "ChunkError", "chunk_of", "read_chunk"]
