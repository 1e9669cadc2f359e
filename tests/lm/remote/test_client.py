import socket

import pytest
from aiohttp import web

from edgepipe.lm.remote.client import OpenAIClient, RemoteStats, retry_after
from edgepipe.lm.remote.errors import EngineConfigError, EngineRequestError, EngineUnavailable
from edgepipe.lm.sampling import SamplingParams

from .fake_engine import DONE, chunk, fake_engine, sse, status

HELLO = [{"role": "user", "content": "hello"}]
PARAMS = SamplingParams(max_new_tokens=8)


async def collect(client: OpenAIClient, stats: RemoteStats | None = None) -> list[str]:
    try:
        return [p async for p in client.stream(HELLO, PARAMS, stats or RemoteStats())]
    finally:
        await client.close()


async def test_pieces_stream_with_the_servers_figures_and_the_key_is_sent_never_shown() -> None:
    async with fake_engine() as engine:
        usage = {"completion_tokens": 3, "prompt_tokens": 9, "total_tokens": 12}
        timings = {"prompt_n": 9, "prompt_ms": 4.0, "predicted_n": 3, "predicted_ms": 30.0}
        engine.chat = lambda r: sse(r, b":\n\n", chunk(None, role="assistant"), chunk("A"), 0.02, chunk("B"),
                                    0.02, chunk("C", "length"), b'data: {"choices":[],"usage":'
                                    + str(usage).replace("'", '"').encode() + b',"timings":'
                                    + str(timings).replace("'", '"').encode() + b"}\n\n", DONE)  # fmt: skip
        client = OpenAIClient(engine.url, model="m", api_key="sekrit-key")
        stats = RemoteStats()
        assert await collect(client, stats) == ["A", "B", "C"]
    assert (stats.prompt_tokens, stats.new_tokens, stats.stop_reason) == (9, 3, "max_new_tokens")
    assert stats.ttft_ms > 0
    assert len(stats.token_ms) == 2
    assert stats.tpot_ms >= 15
    assert (stats.server["predicted_ms"], stats.prefill_ms) == (30.0, 4.0)
    assert engine.headers[0]["Authorization"] == "Bearer sekrit-key"
    body = engine.requests[0]
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})
    assert (body["model"], body["max_tokens"], body["messages"]) == ("m", 8, HELLO)
    assert "sekrit" not in repr(client)


async def test_a_server_that_only_pings_ends_at_the_first_token_deadline() -> None:
    async with fake_engine() as engine:
        engine.chat = lambda r: sse(r, *[b":\n\n", 0.05] * 100)
        client = OpenAIClient(engine.url, first_token_s=0.3)
        with pytest.raises(EngineUnavailable, match=r"no first token within 0.3 s \(\d+ pings") as raised:
            await collect(client)
    assert raised.value.cause == "first_token"


async def test_the_whole_request_has_its_own_deadline() -> None:
    async with fake_engine() as engine:
        engine.chat = lambda r: sse(r, *[chunk("a"), 0.05] * 100)
        client = OpenAIClient(engine.url, first_token_s=1.0, request_s=0.4)
        with pytest.raises(EngineUnavailable, match=r"no end within 0\.4 s") as raised:
            await collect(client)
    assert raised.value.cause == "timeout"


@pytest.mark.parametrize(
    ("parts", "cause"),
    [
        ((chunk("a"),), "cut_off"),  # ended without [DONE] or a finish
        ((chunk("a"), b'data: {"choices": [{"delta": {"cont'), "cut_off"),  # cut mid-event
        ((chunk("a"), b'data: {"error":{"code":500,"message":"decode failed","type":"server_error"}}\n\n'),
         "stream_error"),
    ],
)  # fmt: skip
async def test_a_stream_cut_off_or_failing_after_the_200_is_an_unavailable_engine(
    parts: tuple[bytes, ...], cause: str
) -> None:
    async with fake_engine() as engine:
        engine.chat = lambda r: sse(r, *parts)
        client = OpenAIClient(engine.url)
        pieces: list[str] = []

        async def read() -> None:
            try:
                async for piece in client.stream(HELLO, PARAMS, RemoteStats()):
                    pieces.append(piece)
            finally:
                await client.close()

        with pytest.raises(EngineUnavailable) as raised:
            await read()
    assert (pieces, raised.value.cause) == (["a"], cause)


async def test_a_finished_stream_without_done_is_accepted() -> None:
    async with fake_engine() as engine:
        engine.chat = lambda r: sse(r, chunk("a"), chunk("b", "stop"))
        assert await collect(OpenAIClient(engine.url)) == ["a", "b"]


@pytest.mark.parametrize(
    ("code", "body", "headers", "kind", "cause", "wait"),
    [
        (401, {"error": {"message": "Invalid API Key", "type": "authentication_error"}}, None,
         EngineConfigError, "unauthorized", None),
        (404, {"error": {"message": "model 'x' not found"}}, None, EngineConfigError, "not_found", None),
        (429, {"error": {"message": "rate limited"}}, {"Retry-After": "3"}, EngineUnavailable, "http_429", 3.0),
        (503, {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}, None,
         EngineUnavailable, "loading", None),
        (400, {"error": {"message": "request (300 tokens) exceeds the available context size (256 tokens)",
                         "type": "exceed_context_size_error"}}, None, EngineRequestError, "context", None),
    ],
)  # fmt: skip
async def test_refusals_are_sorted_by_what_to_do(code, body, headers, kind, cause, wait) -> None:  # type: ignore[no-untyped-def]
    async with fake_engine() as engine:
        engine.chat = status(code, body, headers)
        with pytest.raises(kind) as raised:
            await collect(OpenAIClient(engine.url, api_key="sekrit-key"))
    assert raised.value.cause == cause
    assert getattr(raised.value, "retry_after_s", None) == wait
    assert "sekrit" not in str(raised.value)


async def test_a_url_that_answers_html_is_a_configuration_error() -> None:
    async def page(request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html><body>Welcome</body></html>", content_type="text/html")

    async with fake_engine() as engine:
        engine.chat = page
        with pytest.raises(EngineConfigError, match=r"text/html.*not an OpenAI-compatible API") as raised:
            await collect(OpenAIClient(engine.url))
    assert raised.value.cause == "not_an_api"


async def test_a_refused_connection_and_a_whole_answer() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EngineUnavailable, match="cannot connect") as raised:
        await collect(OpenAIClient(f"http://127.0.0.1:{port}/v1"))
    assert raised.value.cause == "refused"
    async with fake_engine() as engine:
        whole = {"choices": [{"message": {"role": "assistant", "content": "all at once"}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 4, "completion_tokens": 3}}  # fmt: skip
        engine.chat = status(200, whole)
        stats = RemoteStats()
        assert await collect(OpenAIClient(engine.url), stats) == ["all at once"]
    assert (stats.new_tokens, stats.stop_reason) == (3, "stop_token")


async def test_the_probe_reads_llama_servers_props_else_the_model_list() -> None:
    async with fake_engine() as engine:
        client = OpenAIClient(engine.url)
        info = await client.probe()
        assert (info.kind, info.model, info.slots) == ("openai", "fake-model", None)
        engine.props = {"total_slots": 3, "modalities": {"vision": True, "audio": False},
                        "default_generation_settings": {"n_ctx": 512}, "model_alias": "tiny"}  # fmt: skip
        info = await client.probe()
        await client.close()
    assert (info.kind, info.slots, info.vision, info.context, info.model) == (
        "llama.cpp",
        3,
        True,
        512,
        "tiny",
    )


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after("5") == 5.0
    assert retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412485.0) == 5.0
    assert retry_after("soon") is None
    assert retry_after(None) is None
