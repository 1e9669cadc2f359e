"""Against a real llama.cpp server (``llama-server``) on a free loopback port, loading a tiny
random-weight GGUF whose greedy answer is "aaaa..." (scripts/tiny_gguf.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from edgepipe.lm.remote.circuit import CLOSED, OPEN
from edgepipe.lm.remote.client import OpenAIClient, RemoteStats
from edgepipe.lm.remote.engine import RemoteEngine, RemoteLM
from edgepipe.lm.remote.engines import Engines, Written
from edgepipe.lm.remote.errors import EngineConfigError, EngineRequestError, EngineUnavailable
from edgepipe.lm.sampling import SamplingParams
from edgepipe.lm.worker import LMWorker
from scripts import llama_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

GREEDY = SamplingParams(max_new_tokens=8)
HELLO = [{"role": "user", "content": "hello"}]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def stream(client: OpenAIClient, messages: list[dict[str, str]], params: SamplingParams = GREEDY,
                 stats: RemoteStats | None = None) -> list[str]:  # fmt: skip
    try:
        return [piece async for piece in client.stream(messages, params, stats or RemoteStats())]
    finally:
        await client.close()


async def test_the_tokens_stream_with_the_servers_figures(llama: llama_server.Server) -> None:
    client = OpenAIClient(llama.url)
    info = await client.probe()
    assert (info.kind, info.slots, info.vision) == ("llama.cpp", 1, False)
    stats = RemoteStats()
    pieces = await stream(client, HELLO, stats=stats)
    assert "".join(pieces) == "a" * 8
    assert len(pieces) == 8  # one event per token
    assert (stats.new_tokens, stats.stop_reason) == (8, "max_new_tokens")  # finish_reason: length
    assert stats.prompt_tokens > 5
    assert stats.server["predicted_n"] == 8  # llama-server's timings, from its last chunk
    assert stats.ttft_ms > 0
    assert len(stats.token_ms) == 7


async def test_a_prompt_past_the_context_is_this_requests_400_only(llama: llama_server.Server) -> None:
    remote = RemoteLM(llama.url)
    try:
        with pytest.raises(EngineRequestError, match="exceeds the available context") as raised:
            async for _ in remote.generate("x" * 1100, GREEDY):
                pass
        assert raised.value.cause == "context"
        assert remote.circuit.state == CLOSED  # the engine is fine: the next request goes to it
        assert "".join([p async for p in remote.generate("hello", GREEDY)]) == "a" * 8
    finally:
        await remote.close()


async def test_a_long_prompt_passes_the_first_token_deadline(llama: llama_server.Server) -> None:
    # ~950 positions of prefill take the tiny model ~50 ms on one thread, a short prompt ~5 ms:
    # the same 25 ms deadline lets the short one through and cuts the long one.
    assert "".join(await stream(OpenAIClient(llama.url, first_token_s=0.025), HELLO)) == "a" * 8
    client = OpenAIClient(llama.url, first_token_s=0.025)
    with pytest.raises(EngineUnavailable, match=r"no first token within 0\.025 s") as raised:
        await stream(client, [{"role": "user", "content": "x " * 450}])
    assert raised.value.cause == "first_token"


async def test_a_wrong_key_or_path_is_a_configuration_error(llama_binary: Path, gguf_model: Path,
                                                            tmp_path: Path) -> None:  # fmt: skip
    server = llama_server.Server(gguf_model, extra=("--api-key", "right-key-1234"), log=tmp_path / "log")
    server.start()
    try:
        with pytest.raises(EngineConfigError, match="HTTP 401") as raised:
            await stream(OpenAIClient(server.url, api_key="wrong-key-5678"), HELLO)
        assert raised.value.cause == "unauthorized"
        assert "wrong-key-5678" not in str(raised.value)
        with pytest.raises(EngineConfigError, match="HTTP 404") as raised:
            await stream(OpenAIClient(server.url.replace("/v1", "/v9"), api_key="right-key-1234"), HELLO)
        assert raised.value.cause == "not_found"
        assert "".join(await stream(OpenAIClient(server.url, api_key="right-key-1234"), HELLO)) == "a" * 8
    finally:
        server.stop()


async def test_with_one_slot_a_second_request_waits_its_turn_or_goes_local(
    llama: llama_server.Server, tiny_models: dict[str, Path]
) -> None:
    long = SamplingParams(max_new_tokens=300)
    remote = RemoteLM(llama.url)
    await remote.start()
    assert remote.slots == 1  # from /props
    engines = Engines(remote, None)

    async def write(engines: Engines, params: SamplingParams) -> Written:
        written = Written()
        async for _ in engines.write("hello", params, written):
            pass
        return written

    try:
        first, second = await asyncio.gather(write(engines, long), write(engines, GREEDY))
        assert (first.engine, second.engine) == ("remote", "remote")  # the second waited its turn
        local = LMWorker(tiny_models["gqa"])
        with_local = Engines(remote, local)
        try:
            first, second = await asyncio.gather(write(with_local, long), write(with_local, GREEDY))
        finally:
            await local.aclose()
        assert (first.engine, second.engine) == ("remote", "local")  # every slot busy: local
    finally:
        await remote.close()


async def test_a_server_killed_mid_request_falls_back_to_local_and_comes_back(
    llama_binary: Path, gguf_model: Path, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    server = llama_server.Server(gguf_model, ctx=1024, log=tmp_path / "log").start()
    clock = Clock()
    remote = RemoteLM(RemoteEngine(server.url), clock=clock)
    local = LMWorker(tiny_models["gqa"])
    engines = Engines(remote, local)
    try:
        written = Written()
        pieces = 0
        async for _ in engines.write("hello", SamplingParams(max_new_tokens=900), written):
            pieces += 1
            if pieces == 1:
                server.kill()  # SIGKILL while it writes
        assert (written.engine, written.stats and written.stats.stop_reason) == ("remote", "engine_failed")
        assert pieces < 900
        assert remote.circuit.state == OPEN
        written = Written()
        text = "".join([p async for p in engines.write("hello", GREEDY, written)])
        assert (written.engine, bool(text)) == ("local", True)  # the circuit is open: local writes
        server.start()  # the same port again
        clock.t += 120  # past any backoff
        written = Written()
        text = "".join([p async for p in engines.write("hello", GREEDY, written)])
        assert (written.engine, text, remote.circuit.state) == ("remote", "a" * 8, CLOSED)
    finally:
        await remote.close()
        await local.aclose()
        server.stop()


async def test_loading_at_start_up_is_a_503_that_opens_the_circuit_until_the_server_is_up(
    llama_binary: Path, gguf_model: Path, tmp_path: Path
) -> None:
    # llama-server opens its port before it loads the model: a model read from a FIFO that
    # nobody writes keeps it loading, so every request meanwhile is a 503 "Loading model".
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    loading = llama_server.Server(fifo, log=tmp_path / "log").start(wait=False)
    clock = Clock()
    remote = RemoteLM(RemoteEngine(loading.url), clock=clock)
    engines = Engines(remote, None)
    try:
        for _ in range(100):  # until the port is open
            written = Written()
            async for _ in engines.write("hello", GREEDY, written):
                pass
            if remote.circuit.cause == "loading":
                break
            clock.t += 120
            await asyncio.sleep(0.05)
        assert (remote.circuit.state, remote.circuit.cause, written.skipped) == (OPEN, "loading", "loading")
        loading.kill()
        up = llama_server.Server(gguf_model, port=loading.port, log=tmp_path / "log").start()  # restarted
        try:
            clock.t += 120
            written = Written()
            text = "".join([p async for p in engines.write("hello", GREEDY, written)])
            assert (written.engine, text, remote.circuit.state) == ("remote", "a" * 8, CLOSED)
        finally:
            up.stop()
    finally:
        await remote.close()
        loading.kill()


def test_the_binary_reports_its_version(llama_binary: Path) -> None:
    done = subprocess.run([str(llama_binary), "--version"], capture_output=True, text=True, timeout=30)
    assert "11434" in done.stdout + done.stderr
