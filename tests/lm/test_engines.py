from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

from edgepipe import Pipeline
from edgepipe.lm import SamplingParams
from edgepipe.lm.describe import Describe
from edgepipe.lm.remote.circuit import CLOSED, OPEN, REFUSED
from edgepipe.lm.remote.engine import RemoteEngine, RemoteLM
from edgepipe.lm.remote.engines import Engines, Written
from edgepipe.lm.worker import LMWorker
from edgepipe.runner import RunConfig
from edgepipe.testing import FakeSource, ListSink, run_pipeline
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire.results import Message

from .remote.fake_engine import DONE, chunk, fake_engine, sse, status

PARAMS = SamplingParams(max_new_tokens=6, ignore_eos=True)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def write(engines: Engines) -> tuple[str, Written]:
    written = Written()
    text = "".join([p async for p in engines.write("hello", PARAMS, written)])
    return text, written


async def test_the_local_model_writes_while_the_engine_is_down_and_the_engine_again_once_it_answers(
    tiny_models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    async with fake_engine() as engine:
        remote = RemoteLM(RemoteEngine(engine.url, first_token_s=2.0), clock=clock)
        engine.chat = status(503, {"error": {"message": "Loading model"}})
        local = LMWorker(tiny_models["gqa"])
        engines = Engines(remote, local)
        try:
            with caplog.at_level(logging.WARNING):
                text, written = await write(engines)  # 503: the local model writes this one
                assert (written.engine, remote.circuit.state, remote.circuit.cause) == (
                    "local",
                    OPEN,
                    "loading",
                )
                assert written.stats is not None
                assert written.stats.new_tokens == 6
                await write(engines)  # the circuit is open: straight to the local model
                assert len(engine.requests) == 1
            assert sum("Loading model" in r.getMessage() for r in caplog.records) == 1  # said once
            engine.chat = lambda r: sse(r, chunk("Back"), chunk(" again", "stop"), DONE)
            clock.t += 1.3  # past the backoff (1 s, 20% jitter)
            text, written = await write(engines)
            assert (text, written.engine, remote.circuit.state) == ("Back again", "remote", CLOSED)
            assert (engines.fallbacks, engines.written) == (2, {"local": 2, "remote": 1})
        finally:
            await remote.close()
            await local.aclose()


async def test_without_a_local_model_a_request_the_engine_cannot_take_is_skipped_and_counted() -> None:
    remote = RemoteLM(f"http://127.0.0.1:{closed_port()}/v1")
    engines = Engines(remote, None)
    try:
        text, written = await write(engines)
        assert (text, written.engine, written.skipped) == ("", "", "refused")
        assert "cannot connect" in written.error
        text, written = await write(engines)  # the circuit is open now
        assert written.skipped == "circuit_open"
        assert engines.skipped == {"refused": 1, "circuit_open": 1}
    finally:
        await remote.close()


async def test_a_wrong_key_is_a_configuration_error_said_once_and_never_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with fake_engine() as engine:
        engine.chat = status(401, {"error": {"message": "Invalid API Key"}})
        remote = RemoteLM(RemoteEngine(engine.url, api_key="wrong-key-123"))
        engines = Engines(remote, None)
        try:
            with caplog.at_level(logging.WARNING):
                for _ in range(5):
                    await write(engines)
        finally:
            await remote.close()
    assert remote.circuit.state == REFUSED
    assert len(engine.requests) == 1
    assert engines.skipped == {"unauthorized": 1, "refused": 4}
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 1
    assert "check the API key" in told[0]
    assert "wrong-key-123" not in caplog.text


async def test_with_every_slot_busy_a_request_goes_to_the_local_model(tiny_models: dict[str, Path]) -> None:
    async with fake_engine() as engine:
        engine.chat = lambda r: sse(r, chunk("slow"), 0.5, chunk(" answer", "stop"), DONE)
        remote = RemoteLM(RemoteEngine(engine.url, slots=1))
        local = LMWorker(tiny_models["gqa"])
        engines = Engines(remote, local)
        try:
            (_, first), (_, second) = await asyncio.gather(write(engines), write(engines))
        finally:
            await remote.close()
            await local.aclose()
    assert sorted([first.engine, second.engine]) == ["local", "remote"]
    assert len(engine.requests) == 1


def test_describe_says_which_engine_wrote_each_description_and_shows_its_figures() -> None:
    async def serve_and_run() -> tuple[list[Message], Describe]:
        async with fake_engine() as engine:
            engine.chat = lambda r: sse(r, chunk("A face"), chunk(" walks by.", "stop"), DONE)
            describe = Describe(RemoteEngine(engine.url, model="scene"), template="{summary}:", every_s=3600)
            sink: ListSink[Message] = ListSink()
            p = Pipeline("t")
            detections = [Detections("cam", i, None, None, 64, 64, "m", [Detection((0, 0, 9, 9), 0.9, 0, "face")])
                          for i in range(3)]  # fmt: skip
            src = p.source("faces", FakeSource(detections))
            p.sink(
                "out", sink, inputs=p.stage("describe", describe, inputs=src, policy="latest", queue_size=4)
            )
            await asyncio.to_thread(run_pipeline, p, RunConfig(governed=False))
            assert engine.requests[0]["model"] == "scene"
            return sink.items, describe

    items, describe = asyncio.run(serve_and_run())
    event = items[-1].data
    assert (event["what"], event["engine"], event["text"]) == ("description", "remote", "A face walks by.")
    assert [m.data["text"] for m in items[:-1]] == ["A face", " walks by."]
    assert event["ttft_ms"] > 0
    assert describe.loads_model is False
    assert describe._gauges["engine"] == CLOSED
    assert describe._gauges["remote_ttft_ms"] > 0


async def test_a_stop_ends_a_request_waiting_on_the_engine_at_once_and_says_nothing_of_the_engine() -> None:
    async with fake_engine() as engine:
        engine.chat = lambda r: sse(r, *[b":\n\n", 0.05] * 200)  # only pings: no first token for 10 s
        remote = RemoteLM(RemoteEngine(engine.url, first_token_s=10.0))
        engines = Engines(remote, None)
        try:
            loop = asyncio.get_running_loop()
            loop.call_later(0.3, engines.cancel)
            t0 = loop.time()
            text, written = await write(engines)
            assert loop.time() - t0 < 2.0
        finally:
            await remote.close()
    assert (text, written.engine, remote.circuit.state) == ("", "remote", CLOSED)
    assert written.stats is not None
    assert written.stats.stop_reason == "cancelled"
