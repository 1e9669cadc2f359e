"""The MQTT sink's own tasks: a stop cut short by the node's timeout ends them; one that fails
degrades the sink, never the node."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

from edgepipe import Pipeline
from edgepipe.runner import RunConfig, run_async
from edgepipe.sinks import MqttSink
from edgepipe.testing import FakeSource
from edgepipe.vision import Detections
from edgepipe.wire.results import Message
from tests.sinks.broker import Mosquitto, subscribed
from tests.sinks.mqtt.test_sink import frame

pytestmark = pytest.mark.slow


class Camera:
    """What the sink reads of a source: its state."""

    state_info = ("live", "")


@pytest.mark.timeout(60)
async def test_a_stop_cut_short_during_the_flush_ends_the_sinks_tasks(mosquitto: Mosquitto) -> None:
    """A node gives a hook a bounded time (0.5 s at the least): when it runs out while the sink
    flushes into a broker that does not answer (here: paused), the stop ends then, tasks and
    all, instead of waiting for ever on the camera-state watcher."""
    sink = MqttSink(mosquitto.url, "cam1")
    sink.name_pipeline("test")  # outside a pipeline: the name and the sources are given, not learnt
    sink.sources = {"camera": Camera()}
    async with subscribed(mosquitto.port, ("edgepipe/cam1/test/status",)) as sub:
        await sink.start()
        await sub.wait_for(
            lambda: [h.payload for h in sub.on("edgepipe/cam1/test/status")][-1:] == [b"online"]
        )
    assert mosquitto.process is not None
    os.kill(mosquitto.process.pid, signal.SIGSTOP)  # connected, but no PUBACK comes any more
    try:
        for n in range(20):  # QoS 1: each waits for the broker's acknowledgement
            sink.put(Message("event", {"source": "camera", "what": f"event {n}"}))
        await asyncio.sleep(0.2)
        assert len(sink.outbox) > 0

        async def stop_with_the_hook_timeout() -> bool:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):  # shorter than the flush (2 s)
                    await sink.stop()
            return True

        assert await asyncio.wait_for(stop_with_the_hook_timeout(), 15)  # old code: a hang here
        assert all(task.done() for task in sink._tasks)
    finally:
        os.kill(mosquitto.process.pid, signal.SIGCONT)


class BrokenStatus:
    """A source's state that cannot be read (a bug in it)."""

    @property
    def state_info(self) -> tuple[str, str]:
        raise RuntimeError("state_info is broken")


class BrokenCamera:
    """A source of detections whose status (what the graph hands the sink) is broken."""

    status = BrokenStatus()

    async def __aiter__(self) -> AsyncIterator[Detections]:
        for n in range(60):
            yield frame(n, n % 2)
            await asyncio.sleep(0.02)


def run_with(sink: MqttSink, source: Any) -> Pipeline:
    p = Pipeline("test")
    p.sink("mqtt", sink, inputs=p.source("results", source), queue_size=16)
    return p


@pytest.mark.timeout(60)
async def test_a_failing_state_watcher_or_connection_degrades_the_sink_not_the_node(
    mosquitto: Mosquitto,
) -> None:
    watcher = MqttSink(mosquitto.url, "cam1")  # fed by a source whose status is broken
    connection = MqttSink(mosquitto.url, "cam2")

    def bug(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the session")

    connection.topics.status_publication = bug  # type: ignore[method-assign]
    async with subscribed(mosquitto.port, ("edgepipe/cam1/test/camera/detections",)) as sub:
        fake = FakeSource([frame(n, n % 2) for n in range(60)], interval_s=0.02)
        for sink, source in ((watcher, BrokenCamera()), (connection, fake)):
            report = await asyncio.wait_for(run_async(run_with(sink, source), RunConfig(governed=False)), 30)
            node = next(n for n in report.stats.nodes if n.node_id == "mqtt")
            assert (node.items_in, node.errors, node.state) == (60, 0, "done"), node
            assert node.gauges["errors"] >= 1, node.gauges
        await sub.wait_for(lambda: len(sub.heard) == 60, what="cam1's detections")


@pytest.mark.timeout(60)
async def test_a_stop_leaves_the_end_state_of_each_retained_topic_before_offline(
    mosquitto: Mosquitto,
) -> None:
    """A subscriber that comes after the stop reads no camera live, no face counted, no engine
    up: each retained topic the sink wrote ends in its end state (a file that ended keeps
    ``ended``), said before ``offline``; the discovery configs stay."""
    root = "edgepipe/cam1/test"
    items = [
        Message("source_state", {"source": "camera", "state": "live", "reason": ""}),
        Message("source_state", {"source": "clip", "state": "ended", "reason": "90 frames"}),
        frame(0, 2),
        Message("engine_state", {"engine": "remote", "state": "closed", "cause": ""}),
    ]
    async with subscribed(mosquitto.port) as sub:
        report = await run_async(run_with(MqttSink(mosquitto.url, "cam1"), FakeSource(items, interval_s=0.05)),
                                 RunConfig(governed=False))  # fmt: skip
        await sub.wait_for(lambda: sub.on(f"{root}/status")[-1:] and sub.on(f"{root}/status")[-1].payload
                           == b"offline", what="offline at the stop")  # fmt: skip
    assert report.failed_sinks == ()
    ending = (f"{root}/camera/source_state", f"{root}/camera/count", f"{root}/all/engine_state")
    last = {h.topic: (i, h) for i, h in enumerate(sub.heard) if h.topic in (*ending, f"{root}/status")}
    said = [last[t][1].json() for t in ending]
    assert [said[0]["state"], said[1]["count"], said[2]["state"]] == ["stopped", 0, "stopped"]
    assert max(last[t][0] for t in ending) < last[f"{root}/status"][0]  # said before offline
    async with subscribed(mosquitto.port) as late:
        await late.wait_for(lambda: len(late.heard) >= 11, what="the retained messages")
    retained = {h.topic: h for h in late.heard}
    assert retained[f"{root}/status"].payload == b"offline"
    camera = retained[f"{root}/camera/source_state"].json()
    assert (camera["state"], camera["reason"]) == ("stopped", "the pipeline stopped")
    assert retained[f"{root}/clip/source_state"].json()["state"] == "ended"
    count = retained[f"{root}/camera/count"].json()
    assert (count["count"], count["labels"]) == (0, {})
    engine = retained[f"{root}/all/engine_state"].json()
    assert (engine["engine"], engine["state"]) == ("remote", "stopped")
    assert sum(t.startswith("homeassistant/") for t in retained) == 6  # two cameras' configs, kept
