from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiomqtt
import pytest

from edgepipe import load_pipeline
from edgepipe.core.run import run_async
from edgepipe.core.runtime import Runtime
from tests.sinks.broker import Mosquitto

pytestmark = pytest.mark.slow
FLEET = Path(__file__).resolve().parents[2] / "pipelines" / "fleet_events.py"


async def test_fleet_events_follows_every_camera_on_the_broker(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    broker.start()
    results = tmp_path / "fleet.jsonl"

    async def cameras(runtime: Runtime) -> None:
        await asyncio.sleep(1.5)  # the subscriber is up
        async with aiomqtt.Client("127.0.0.1", broker.port) as client:
            for device in ("cam1", "cam2"):
                await client.publish(f"edgepipe/{device}/face_privacy/status", b"online", qos=1, retain=True)
                event = {"v": 1, "kind": "event", "source": "camera", "what": f"{device} saw a face"}
                await client.publish(f"edgepipe/{device}/face_privacy/camera/event", json.dumps(event), qos=1)
            await client.publish("edgepipe/cam2/face_privacy/status", b"offline", qos=1, retain=True)
        await asyncio.sleep(1.0)
        runtime.request_stop()

    try:
        p = load_pipeline(FLEET, ["--broker", broker.url, "--summary-s", "1"])
        report = await run_async(p, results_path=str(results), watchers=[cameras])
    finally:
        broker.stop()
    assert report.stopped_by == "stop"  # drained, not "forced"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    statuses = [(m["data"]["device"], m["data"]["status"]) for m in lines if m["kind"] == "fleet_status"]
    assert statuses == [("cam1", "online"), ("cam2", "online"), ("cam2", "offline")]
    events = [m["data"] for m in lines if m["kind"] == "fleet_event"]
    assert [(e["device"], e["source"], e["what"]) for e in events] == [
        ("cam1", "camera", "cam1 saw a face"), ("cam2", "camera", "cam2 saw a face")]  # fmt: skip


def test_a_wrong_broker_url_is_refused_at_declaration() -> None:
    with pytest.raises(Exception, match="the scheme must be mqtt:// or mqtts://"):
        load_pipeline(FLEET, ["--broker", "http://127.0.0.1"])
