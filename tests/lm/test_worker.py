from __future__ import annotations

import asyncio
from contextlib import aclosing
from pathlib import Path

import pytest

from edgepipe import Pipeline
from edgepipe.core.results import Message
from edgepipe.lm import LanguageModel, SamplingParams
from edgepipe.lm.describe import Describe
from edgepipe.lm.worker import LMWorker
from edgepipe.testing import FakeSource, ListSink, run_pipeline
from edgepipe.vision.detection import Detection, Detections

PARAMS = SamplingParams(max_new_tokens=16, ignore_eos=True)


async def test_async_pieces_equal_the_blocking_text(tiny_models: dict[str, Path]) -> None:
    worker = LMWorker(tiny_models["gqa"])
    pieces = [piece async for piece in worker.generate("Hello", PARAMS)]
    assert "".join(pieces) == LanguageModel(tiny_models["gqa"]).complete("Hello", PARAMS)
    assert worker.last_stats.new_tokens == 16
    assert worker.last_stats.stop_reason == "max_new_tokens"
    worker.close()


async def test_requests_take_turns_and_a_cancelled_one_stops_at_a_token(tiny_models: dict[str, Path]) -> None:
    worker = LMWorker(tiny_models["concat"], queue_size=2)
    long = SamplingParams(max_new_tokens=40, ignore_eos=True)

    async def first_pieces(count: int) -> list[str]:
        out = []
        async with aclosing(worker.generate("abc", long)) as pieces:
            async for piece in pieces:
                out.append(piece)
                if len(out) == count:
                    break  # the caller stops: the request ends here
        return out

    results = await asyncio.gather(first_pieces(3), worker.complete("abc", long), first_pieces(5))
    assert [len(results[0]), len(results[2])] == [3, 5]
    assert worker.requests == 3
    assert worker.last_stats.stop_reason == "cancelled"  # the last one in line stopped early
    assert 5 <= worker.last_stats.new_tokens < 40  # a piece may take more than one token (UTF-8)
    worker.close()


async def test_the_event_loop_runs_between_tokens(tiny_models: dict[str, Path]) -> None:
    worker = LMWorker(tiny_models["gqa"])
    await worker.start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async with asyncio.TaskGroup() as group:
        task = group.create_task(ticker())
        text = await worker.complete("tick", SamplingParams(max_new_tokens=30, ignore_eos=True))
        task.cancel()
    assert text
    assert ticks >= 30  # at least one loop turn per token
    worker.close()


def frame_detections(seq: int, faces: int) -> Detections:
    items = [Detection((0.0, 0.0, 10.0, 10.0), 0.9, 0, "face") for _ in range(faces)]
    return Detections("cam", seq, None, None, 64, 64, "m", items)


def test_describe_prompt_summarizes_the_window(tiny_models: dict[str, Path]) -> None:
    node = Describe(tiny_models["gqa"], template="{summary} | {frames} frames from {sources}", window_s=5.0)
    for seq in range(4):
        node.observe(frame_detections(seq, faces=seq % 3), now=100.0 + seq)
    node.observe(frame_detections(9, faces=2), now=90.0)  # too old for the window
    assert node.prompt(now=104.0) == "face in 2 of 4 frames (up to 2 at once) | 4 frames from cam"
    with pytest.raises(ValueError, match="template"):
        Describe(tiny_models["gqa"], template="{nonsense}")


def test_describe_streams_tokens_then_an_event(tiny_models: dict[str, Path]) -> None:
    sink: ListSink[Message] = ListSink()
    p = Pipeline("t")
    src = p.source("faces", FakeSource([frame_detections(i, 1) for i in range(5)]))
    describe = Describe(
        tiny_models["gqa"],
        template="{summary}:",
        every_s=3600,
        params=SamplingParams(max_new_tokens=12, ignore_eos=True),
    )
    p.sink("out", sink, inputs=p.stage("describe", describe, inputs=src, policy="latest", queue_size=4))
    run_pipeline(p)
    kinds = [m.kind for m in sink.items]
    assert kinds[-1] == "event"
    assert set(kinds[:-1]) == {"token"}
    event = sink.items[-1].data
    assert event["text"] == "".join(m.data["text"] for m in sink.items[:-1])
    assert event["new_tokens"] == 12
    assert event["ttft_ms"] > 0
    assert "face" in event["prompt"]
