from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import aiomqtt
import pytest

from edgepipe import Message, load_pipeline
from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime.engine import Runtime
from tests.sinks.broker import Mosquitto

FLEET = Path(__file__).resolve().parents[2] / "pipelines" / "fleet_events.py"


@pytest.mark.slow
async def test_fleet_events_follows_every_camera_on_the_broker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """... and skips what it cannot read: counted, logged once per fault (briefly), never a
    restart of the source that would get every retained message again."""
    broker = Mosquitto(tmp_path)
    broker.start()
    results = tmp_path / "fleet.jsonl"
    bad = [
        ("edgepipe/cam1/face_privacy/camera/event", b"5"),
        ("edgepipe/cam1/face_privacy/camera/event", b'["a"]'),
        ("edgepipe/cam1/face_privacy/camera/event", b'{"device": 1, "pipeline": null, "what": "not cam1"}'),
        ("edgepipe/cam1/face_privacy/camera/event", b'{"what": "' + b"x" * 10_000_000 + b'"}'),
    ]

    async def cameras(runtime: Runtime) -> None:
        await asyncio.sleep(1.5)  # the subscriber is up
        async with aiomqtt.Client("127.0.0.1", broker.port) as client:
            for device in ("cam1", "cam2"):
                await client.publish(f"edgepipe/{device}/face_privacy/status", b"online", qos=1, retain=True)
                event = {"v": 1, "kind": "event", "source": "camera", "what": f"{device} saw a face"}
                await client.publish(f"edgepipe/{device}/face_privacy/camera/event", json.dumps(event), qos=1)
                for topic, payload in bad if device == "cam1" else []:
                    await client.publish(topic, payload, qos=1)
            await client.publish("edgepipe/cam2/face_privacy/status", b"offline", qos=1, retain=True)
        await asyncio.sleep(1.0)
        runtime.request_stop()

    try:
        async with aiomqtt.Client("127.0.0.1", broker.port) as client:  # there before the subscriber
            await client.publish("edgepipe/x/p/status", b"\xff\xfe\xfa", qos=1, retain=True)
        p = load_pipeline(FLEET, ["--broker", broker.url, "--summary-s", "1"])
        with caplog.at_level(logging.INFO):
            report = await run_async(
                p, RunConfig(governed=False, results_path=str(results), watchers=[cameras])
            )
    finally:
        broker.stop()
    assert report.stopped_by == "stop"  # drained, not "forced"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    statuses = [(m["data"]["device"], m["data"]["status"]) for m in lines if m["kind"] == "fleet_status"]
    assert statuses == [("cam1", "online"), ("cam2", "online"), ("cam2", "offline")]
    events = [m["data"] for m in lines if m["kind"] == "fleet_event"]
    assert [(e["device"], e["source"], e["what"]) for e in events] == [
        ("cam1", "camera", "cam1 saw a face"), ("cam2", "camera", "cam2 saw a face")]  # fmt: skip
    feed = next(n for n in report.stats.nodes if n.node_id == "broker")
    assert (feed.errors, feed.restarts, feed.gauges["bad_messages"]) == (0, 0, 1 + len(bad)), feed
    skipped = [r.getMessage() for r in caplog.records if "skipped a bad MQTT message" in r.getMessage()]
    assert len(skipped) == 4, skipped  # one per fault: not UTF-8, not an object, contradicts, too large
    assert max(len(r.getMessage()) for r in caplog.records) < 1000


def test_a_wrong_broker_url_is_refused_at_declaration() -> None:
    with pytest.raises(Exception, match="the scheme must be mqtt:// or mqtts://"):
        load_pipeline(FLEET, ["--broker", "http://127.0.0.1"])


def test_the_fleet_log_stays_bounded_and_its_lines_short(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = load_pipeline(FLEET, ["--broker", "mqtt://127.0.0.1:1", "--summary-s", "1"])
    fleet = next(n.target for n in p.nodes if n.node_id == "fleet")
    module = sys.modules[type(fleet).__module__]
    monkeypatch.setattr(module, "MAX_FOLLOWED", 50)  # 4096 in earnest
    with caplog.at_level(logging.INFO):
        for n in range(60):
            fleet.process(Message("fleet_status", {"device": f"cam{n}", "pipeline": "p", "status": "online"}))
        text = "\x1b[2J" + "x" * 5000
        fleet.process(
            Message("fleet_event", {"device": "cam1", "pipeline": "p", "source": "c", "what": text})
        )
        fleet._last_summary = 0.0
        fleet.process(Message("fleet_count", {"device": "cam1", "pipeline": "p", "source": "c", "count": 1}))
    assert len(fleet.status) == 50
    assert fleet.unfollowed == 10
    lines = [r.getMessage() for r in caplog.records]
    assert sum("left out of the summary" in line for line in lines) == 1
    assert sum(line.endswith(" is online") for line in lines) == 50  # those followed
    assert max(len(line) for line in lines) < 500
    assert not any("\x1b" in line for line in lines)  # escaped, as the 4 characters \\x1b
    assert "50 online (cam0/p, cam1/p, " in lines[-1]
    assert "and 30 more" in lines[-1]
