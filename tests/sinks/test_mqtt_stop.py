"""The MQTT sink's stop against a broker that stops answering: bounded by the node's timeout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import pytest

from edgepipe.core.results import Message
from edgepipe.sinks import MqttSink
from tests.sinks.broker import Mosquitto, subscribed

pytestmark = pytest.mark.slow


class Camera:
    """What the sink reads of a source: its id and state."""

    source_id = "camera"
    state_info = ("live", "")


@pytest.mark.timeout(60)
async def test_a_stop_cut_short_during_the_flush_ends_the_sinks_tasks(mosquitto: Mosquitto) -> None:
    """A node gives a hook a bounded time (0.5 s at the least): when it runs out while the sink
    flushes into a broker that does not answer (here: paused), the stop ends then, tasks and
    all, instead of waiting for ever on the camera-state watcher."""
    sink = MqttSink(mosquitto.url, "cam1", pipeline="test", sources=[Camera()])
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
