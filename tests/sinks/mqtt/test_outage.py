"""A broker outage of 6 s while a 15 fps camera runs into the MQTT sink (real Mosquitto)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime.engine import Runtime
from tests.sinks.broker import Mosquitto, subscribed
from tests.sinks.mqtt_pipeline import pipeline

pytestmark = pytest.mark.slow
ROOT = "edgepipe/cam1/mqtt_test"
OUTBOX = 40
BEFORE_S = 3
OUTAGE_S = 6
"""~90 detections made while the broker is away: more than twice what the outbox holds."""


def figures(runtime: Runtime) -> tuple[int, dict[str, Any]]:
    """Frames the camera has sent on, and the sink's gauges (with ``items``: results taken)."""
    snap = runtime.snapshot()
    camera = next(n for n in snap.nodes if n.node_id == "camera")
    sink = next(n for n in snap.nodes if n.node_id == "mqtt")
    return camera.items_out, {**sink.gauges, "items": sink.items_in}


async def until(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not {what} within {timeout_s} s"
        await asyncio.sleep(0.05)


@pytest.mark.timeout(90)
async def test_a_broker_outage_neither_slows_the_camera_nor_grows_memory(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    broker.start()
    seen: dict[str, Any] = {"outbox_max": 0}

    async def outage(runtime: Runtime) -> None:
        await until(lambda: figures(runtime)[1].get("connected") == 1, 10, "connected")
        frames_0, start = figures(runtime)
        await asyncio.sleep(BEFORE_S)
        frames_1, before = figures(runtime)
        await asyncio.to_thread(broker.stop)  # SIGTERM: the broker saves its sessions and goes
        t_stop = time.monotonic()
        while time.monotonic() - t_stop < OUTAGE_S:
            seen["outbox_max"] = max(seen["outbox_max"], figures(runtime)[1]["outbox"])
            await asyncio.sleep(0.1)
        frames_2, during = figures(runtime)
        await asyncio.to_thread(broker.start)  # the same port
        await until(lambda: figures(runtime)[1]["connected"] == 1, 15, "reconnected by itself")
        await until(lambda: figures(runtime)[1]["outbox"] == 0, 10, "the outbox sent")
        await asyncio.sleep(1)
        # Rates over whole windows (before, the outage): the camera's, and the sink's intake,
        # which would stall if publishing ever made process() wait for the broker.
        seen.update(rate_before=(frames_1 - frames_0) / BEFORE_S, rate_during=(frames_2 - frames_1) / OUTAGE_S,
                    taken_before=(before["items"] - start["items"]) / BEFORE_S,
                    taken_during=(during["items"] - before["items"]) / OUTAGE_S, before=before, during=during)  # fmt: skip
        runtime.request_stop()

    try:
        # A persistent session: what reaches the broker while the subscriber reconnects waits for it.
        async with subscribed(broker.port, (f"{ROOT}/#",), persistent=True) as sub:
            p = pipeline(broker=broker.url, device="cam1", outbox=OUTBOX, backoff_max_s=1.0)
            report = await run_async(p, RunConfig(governed=False, watchers=[outage]))
            await sub.wait_for(
                lambda: sub.on(f"{ROOT}/status")[-1].payload == b"offline", what="offline at the stop"
            )
    finally:
        broker.stop()
    # The camera went on at its own rate, and the sink kept taking results: it never waited for
    # the broker (a blocked sink takes next to nothing while it is away). Generous bounds:
    # a busy 2-core machine slows both a little.
    assert seen["rate_before"] > 5, seen
    assert seen["rate_during"] > 0.5 * seen["rate_before"], seen
    assert seen["taken_before"] > 3, seen
    assert seen["taken_during"] > 0.5 * seen["taken_before"], seen
    # Memory stayed within the bound; what did not fit was counted, the detections (lowest rank) first.
    assert seen["outbox_max"] <= OUTBOX
    sink = next(n.gauges for n in report.stats.nodes if n.node_id == "mqtt")
    made = seen["during"]["items"] - seen["before"]["items"]
    assert sink["dropped"] == sink["dropped_detections"] >= made - OUTBOX
    assert sink["reconnects"] >= 1  # one outage; a loaded machine may drop a connection more
    # Every detection the sink was given reached the subscriber or was counted as dropped, but
    # for the few QoS 0 ones on the wire when the broker went (at most half a second's worth).
    given = next(n.items_in for n in report.stats.nodes if n.node_id == "mqtt")
    received = {h.json()["seq"] for h in sub.on(f"{ROOT}/camera/detections")}
    lost = given - len(received) - sink["dropped_detections"]
    assert 0 <= lost <= 8, (given, len(received), sink["dropped_detections"])
    # The oldest went: every detection after the last one missing was delivered, up to the stop.
    missing = set(range(max(received) + 1)) - received
    assert missing
    assert all(seq in received for seq in range(max(missing) + 1, max(received) + 1))
    assert max(missing) < max(received) - OUTBOX // 2  # the outbox's worth of the outage's newest came
    # Publishing resumed: online again after the outage (a stopping Mosquitto sends the last
    # wills of its clients, offline, and keeps it retained; a subscriber coming back may hear a
    # retained one again), offline at the stop.
    statuses = [h.payload for h in sub.on(f"{ROOT}/status")]
    assert statuses[0] == b"online"
    assert b"offline" in statuses[1:-2]
    assert statuses[-2:] == [b"online", b"offline"]
    assert sub.on(f"{ROOT}/camera/source_state")[-1].json()["state"] == "stopped"  # the end state
