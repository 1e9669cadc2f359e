from __future__ import annotations

import asyncio
import gc
import itertools
import re
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from edgepipe import ErrorPolicy, OnError, Pipeline
from edgepipe.lm import SamplingParams
from edgepipe.lm.describe import Describe
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime.engine import Runtime
from edgepipe.testing import FakeSource, ListSink, run_pipeline
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire.results import Message


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
    run_pipeline(p, RunConfig(governed=False))
    kinds = [m.kind for m in sink.items]
    assert kinds[-1] == "event"
    assert set(kinds[:-1]) == {"token"}
    event = sink.items[-1].data
    assert event["text"] == "".join(m.data["text"] for m in sink.items[:-1])
    assert event["new_tokens"] == 12
    assert event["ttft_ms"] > 0
    assert "face" in event["prompt"]


class StallingSource:
    """Two frames' detections, then nothing: a camera that went quiet."""

    async def __aiter__(self) -> AsyncIterator[Detections]:
        for seq in range(2):
            yield frame_detections(seq, 1)
        await asyncio.sleep(3600)


@pytest.mark.slow
async def test_describe_reports_on_time_when_input_stops(tiny_models: dict[str, Path]) -> None:
    # Driven directly, three reports taken and no more: however long the machine takes to write
    # one, the next comes every_s after it began, input or not.
    describe = Describe(tiny_models["gqa"], template="{state}|{frames}", every_s=0.3, window_s=0.25,
                        stale_s=0.2, params=SamplingParams(max_new_tokens=2, ignore_eos=True))  # fmt: skip
    events: list[dict[str, Any]] = []
    await describe.start()
    try:
        async with aclosing(describe.process(aiter(StallingSource()))) as messages:
            async for message in messages:
                if message.kind == "event":
                    events.append(message.data)
                if len(events) == 3:
                    break
    finally:
        await describe.stop()
    assert events[0]["prompt"].startswith("cam: live")
    assert events[0]["prompt"].endswith("|2") or events[0]["prompt"].endswith("|1")
    last = events[-1]  # 0.6 s after the first report, the first frame's: past stale_s
    assert re.fullmatch(r"cam: silent, no frames for \d+ s\|0", last["prompt"]), last["prompt"]
    assert last["sources"]["cam"]["state"] == "silent"
    assert last["sources"]["cam"]["last_frame_s"] > 0.2  # stale_s


def test_a_report_says_when_a_quiet_source_went_silent(tiny_models: dict[str, Path]) -> None:
    # What each report of the one above says, at the times it is written (the window's clock).
    describe = Describe(tiny_models["gqa"], template="{state}|{frames}", every_s=0.3, window_s=0.25,
                        stale_s=0.2)  # fmt: skip
    for seq in range(2):
        describe.observe(frame_detections(seq, 1), now=100.0)
    reports = [100.0 + k * describe.every_s for k in range(3)]
    assert describe.prompt(now=reports[0]) == "cam: live, 2 frames analysed|2"
    assert describe.prompt(now=reports[2]) == "cam: silent, no frames for 1 s|0"
    [state] = describe.window.source_states(reports[2])
    assert state.to_dict()["state"] == "silent"
    assert state.to_dict()["last_frame_s"] == pytest.approx(0.6)


def test_describe_refuses_bad_settings(tiny_models: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="state"):
        Describe(tiny_models["gqa"], template="{weather}")
    with pytest.raises(ValueError, match="every_s"):
        Describe(tiny_models["gqa"], every_s=0)


@pytest.mark.slow
def test_describe_ends_with_its_input_and_reports_the_end(tiny_models: dict[str, Path]) -> None:
    sink: ListSink[Message] = ListSink()
    p = Pipeline("t")
    frames = [frame_detections(i, 1 if i >= 7 else 0) for i in range(10)]
    src = p.source("faces", FakeSource(frames, interval_s=0.05))
    # Each report (4 tokens at 20 tokens/s) takes longer than every_s: reports come back to
    # back, and still the stage ends once its input has and the end is described.
    describe = Describe(tiny_models["gqa"], template="{frames}|{summary}", every_s=0.1, window_s=60,
                        params=SamplingParams(max_new_tokens=4, ignore_eos=True), max_tokens_per_s=20)  # fmt: skip
    p.sink("out", sink, inputs=p.stage("describe", describe, inputs=src, queue_size=16))
    report = run_pipeline(p, RunConfig(governed=False))
    events = [m.data for m in sink.items if m.kind == "event"]
    assert report.stopped_by == "end"
    assert 2 <= len(events) <= 10
    assert events[-1]["prompt"] == "10|face in 3 of 10 frames (up to 1 at once)"
    assert all(e["new_tokens"] == 4 for e in events)


@pytest.mark.slow
def test_a_stop_cuts_the_answer_short_and_starts_no_other(tiny_models: dict[str, Path]) -> None:
    # 60 tokens at 5 tokens/s: 12 s of writing, against a drain deadline of 1 s.
    describe = Describe(tiny_models["gqa"], template="{frames}:", every_s=0.1, max_tokens_per_s=5,
                        params=SamplingParams(max_new_tokens=60, ignore_eos=True))  # fmt: skip
    out: list[Message] = []
    writing = asyncio.Event()

    async def keep(message: Message) -> None:  # on the event loop
        out.append(message)
        if message.kind == "token":
            writing.set()

    p = Pipeline("t")
    src = p.source("faces", FakeSource([frame_detections(0, 1)], repeat=True, interval_s=0.02))
    p.sink("out", keep, inputs=p.stage("describe", describe, inputs=src, policy="latest", queue_size=4))
    stopped_at: list[float] = []

    async def stop_mid_answer(runtime: Runtime) -> None:
        await writing.wait()
        await asyncio.sleep(0.3)  # waiting for its pace; new frames queued behind the answer
        stopped_at.append(time.monotonic())
        runtime.request_stop()

    report = run_pipeline(p, RunConfig(governed=False, drain_timeout_s=1.0, watchers=[stop_mid_answer]))
    took = time.monotonic() - stopped_at[0]
    assert report.stopped_by == "stop"  # not "forced"
    assert took < 0.5, took
    assert describe.requests == 1  # no new answer for what came in meanwhile
    assert out[-1].kind == "event"  # the answer cut short is still reported, as such
    event = out[-1].data
    assert event["stop_reason"] == "cancelled"
    assert 1 <= event["new_tokens"] < 60
    assert event["text"] == "".join(m.data["text"] for m in out if m.kind == "token")


class FailsOnce:
    """Describe, whose first answer breaks off after its first token (a device that failed
    once): a wrapper node with Describe's hooks."""

    def __init__(self, inner: Describe) -> None:
        self.inner = inner
        self.failed = False

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def process(self, items: AsyncIterator[Any]) -> AsyncIterator[Message]:
        async with aclosing(self.inner.process(items)) as messages:
            async for message in messages:
                if message.kind == "token" and not self.failed:
                    self.failed = True
                    raise RuntimeError("the model's device failed")
                yield message


@pytest.fixture
def plan(monkeypatch: pytest.MonkeyPatch) -> MemoryPlan:
    own = MemoryPlan(limit_bytes=1 << 34)
    monkeypatch.setattr(memory, "_PLAN", own)
    return own


@pytest.mark.slow
def test_describe_restarts_and_writes_again(tiny_models: dict[str, Path], plan: MemoryPlan) -> None:
    sink: ListSink[Message] = ListSink()
    p = Pipeline("t")
    src = p.source("faces", FakeSource([frame_detections(i, 1) for i in range(30)], interval_s=0.05))
    describe = Describe(tiny_models["gqa"], template="{summary}:", every_s=0.3,
                        params=SamplingParams(max_new_tokens=4, ignore_eos=True))  # fmt: skip
    restart = ErrorPolicy(OnError.RESTART, backoff_initial_s=0.05)
    p.sink("out", sink, inputs=p.stage("describe", FailsOnce(describe), inputs=src, queue_size=8,
                                       on_error=restart))  # fmt: skip
    report = run_pipeline(p, RunConfig(governed=False))
    stats = report.stats.node("describe")
    assert (stats.errors, stats.restarts) == (1, 1)
    events = [m.data for m in sink.items if m.kind == "event"]
    assert len(events) >= 2  # the model wrote again after the restart, to the end of the input
    assert all(e["new_tokens"] == 4 for e in events)
    assert plan.entries() == []  # the model and its KV cache went with the stop


def test_describe_cancelled_mid_answer_frees_the_model(
    tiny_models: dict[str, Path], plan: MemoryPlan
) -> None:
    describe = Describe(tiny_models["gqa"], template="{summary}:", every_s=3600, max_tokens_per_s=10,
                        params=SamplingParams(max_new_tokens=60, ignore_eos=True))  # fmt: skip
    sink: ListSink[Message] = ListSink()
    p = Pipeline("t")
    src = p.source("faces", FakeSource([frame_detections(0, 1)], repeat=True, interval_s=0.05))
    p.sink("out", sink, inputs=p.stage("describe", describe, inputs=src, policy="latest", queue_size=4))

    async def cancelled_mid_answer() -> weakref.ref[Any]:
        run = asyncio.ensure_future(run_async(p, RunConfig(governed=False)))
        for _ in range(1000):
            if len(sink.items) >= 2:  # tokens are coming: the model is mid-answer
                break
            await asyncio.sleep(0.01)
        assert describe.worker.lm is not None
        model = weakref.ref(describe.worker.lm)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        for _ in range(500):
            if not plan.entries():
                break
            await asyncio.sleep(0.01)
        return model

    model = asyncio.run(cancelled_mid_answer())
    gc.collect()
    assert plan.entries() == []
    assert model() is None


class Camera:
    """A camera's detections with a status, as a video source has (what makes it a source of the node)."""

    def __init__(self, name: str, frames: int) -> None:
        from edgepipe.media.status import SourceStatus

        self.name, self.frames = name, frames
        self.status = SourceStatus(name)
        self.status.set_state("live")

    async def __aiter__(self) -> AsyncIterator[Detections]:
        for seq in range(self.frames):
            yield Detections(self.name, seq, None, None, 64, 64, "m", [])
            await asyncio.sleep(0.01)


def test_four_cameras_get_four_interleaved_descriptions_from_one_model(tiny_models: dict[str, Path]) -> None:
    from edgepipe.runtime.memory_plan import plan_graph

    sink: ListSink[Message] = ListSink()
    p = Pipeline("four")
    cams = [p.source(f"cam{i}", Camera(f"cam{i}", 3)) for i in range(4)]
    describe = Describe(tiny_models["gqa"], template="{sources}: {frames}", every_s=3600,
                        params=SamplingParams(max_new_tokens=10, ignore_eos=True))  # fmt: skip
    p.sink("out", sink, inputs=p.stage("describe", describe, inputs=cams, policy="latest", queue_size=4))
    report = plan_graph(p.validate(), MemoryPlan(limit_bytes=1 << 30, refuse=False))
    caches = [r for r in report.entries if "KV cache" in r.what]
    assert [(r.owner, r.what) for r in caches] == [("describe", "KV cache (shared, 4 slots x 64 positions)")]
    run_pipeline(p, RunConfig(governed=False))
    events = [m.data for m in sink.items if m.kind == "event"]
    cams = ["cam0", "cam1", "cam2", "cam3"]
    rounds = [events[i : i + 4] for i in range(0, len(events), 4)]  # every report: one per camera
    assert rounds
    assert all(sorted(e["source"] for e in batch) == cams for batch in rounds)
    assert all(e["new_tokens"] == 10 and re.fullmatch(r"cam\d: \d", e["prompt"]) for e in events)
    assert all(e["prompt"].startswith(e["source"]) for e in events)  # its own camera's window
    first = {e["request"] for e in rounds[0]}
    order = [m.data["source"] for m in sink.items if m.kind == "token" and m.data["request"] in first]
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches > 3 * 2  # written in turns (one after another would switch 3 times)
    for e in events:
        tokens = [
            m.data["text"] for m in sink.items if m.kind == "token" and m.data["request"] == e["request"]
        ]
        assert "".join(tokens) == e["text"]
    assert describe.worker.slots == 4  # one model, one cache of four rows
    assert describe._gauges["slots"] == 4  # what --stats shows under the table, with kept drafts
    assert float(describe._gauges["accepted/step"]) >= 0
