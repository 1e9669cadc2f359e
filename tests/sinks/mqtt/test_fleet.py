"""A fleet: pipeline processes (``edgepipe run``, one device id each) publishing to one broker."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.sinks.broker import Mosquitto, Subscriber, subscribed
from tests.support import cli_process

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
PIPELINE = "tests/sinks/mqtt_pipeline.py"


def start(broker: Mosquitto, device: str) -> subprocess.Popen[bytes]:
    with (broker.folder / f"{device}.log").open("wb") as log:  # the child has its own copy
        return cli_process.start("run", PIPELINE, "--broker", broker.url, "--device", device, text=False,
                                 stdout=log, stderr=subprocess.STDOUT)  # fmt: skip


def status(sub: Subscriber, device: str) -> bytes | None:
    heard = sub.on(f"edgepipe/{device}/mqtt_test/status")
    return heard[-1].payload if heard else None


def detections_after(sub: Subscriber, device: str, t: float) -> int:
    return sum(1 for h in sub.on(f"edgepipe/{device}/mqtt_test/camera/detections") if h.t > t)


@pytest.mark.timeout(90)
async def test_one_subscriber_sees_the_fleet_and_a_killed_camera_goes_offline_alone(
    mosquitto: Mosquitto,
) -> None:
    devices = ("cam1", "cam2", "cam3")
    processes = {d: start(mosquitto, d) for d in devices}
    try:
        async with subscribed(
            mosquitto.port, ("edgepipe/+/+/status", "edgepipe/+/+/camera/detections")
        ) as sub:
            await sub.wait_for(
                lambda: all(status(sub, d) == b"online" for d in devices), 60, "three cameras online"
            )
            t0 = time.monotonic()
            await sub.wait_for(lambda: all(detections_after(sub, d, t0) >= 5 for d in devices), 20,
                               "detections from each camera")  # fmt: skip
            processes["cam2"].send_signal(signal.SIGKILL)  # no goodbye: the broker sends its last will
            await asyncio.to_thread(processes["cam2"].wait, 10)
            await sub.wait_for(lambda: status(sub, "cam2") == b"offline", 10, "cam2 offline (its will)")
            t_killed = time.monotonic()
            await sub.wait_for(lambda: detections_after(sub, "cam1", t_killed) >= 5
                               and detections_after(sub, "cam3", t_killed) >= 5, 10, "the others go on")  # fmt: skip
            assert status(sub, "cam1") == status(sub, "cam3") == b"online"
            assert detections_after(sub, "cam2", t_killed + 0.5) == 0
        # The broker keeps each device's availability for whoever subscribes later (Home Assistant).
        async with subscribed(mosquitto.port, ("edgepipe/+/+/status",)) as late:
            await late.wait_for(lambda: len(late.heard) >= 3, 10, "three retained statuses")
            assert {h.topic.split("/")[1]: h.payload for h in late.heard} == {
                "cam1": b"online", "cam2": b"offline", "cam3": b"online"}  # fmt: skip
        for device in ("cam1", "cam3"):  # a stop says offline itself, and exits cleanly
            processes[device].send_signal(signal.SIGTERM)
        for device in ("cam1", "cam3"):
            code = await asyncio.to_thread(processes[device].wait, 20)
            assert code == 0, (mosquitto.folder / f"{device}.log").read_text()[-2000:]
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    # Those stopped left their end state; the one killed, its last state, but its last will.
    async with subscribed(
        mosquitto.port, ("edgepipe/+/+/status", "edgepipe/+/+/camera/source_state")
    ) as after:
        await after.wait_for(lambda: len(after.heard) >= 6, 10, "three retained statuses and states")
        assert {h.payload for h in after.heard if h.topic.endswith("/status")} == {b"offline"}
        states = {
            h.topic.split("/")[1]: h.json()["state"] for h in after.heard if h.topic.endswith("/source_state")
        }
        assert states == {"cam1": "stopped", "cam2": "live", "cam3": "stopped"}
