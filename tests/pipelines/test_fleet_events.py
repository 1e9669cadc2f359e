from __future__ import annotations

import asyncio
import itertools
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
        fleet.process(Message("fleet_count", {"device": "cam1", "pipeline": "p", "source": "c", "count": 1}))
        fleet.log_summary()
    assert len(fleet.status) == 50
    assert fleet.unfollowed == 10
    lines = [r.getMessage() for r in caplog.records]
    assert sum("left out of the summary" in line for line in lines) == 1
    assert sum(line.endswith(" is online") for line in lines) == 50  # those followed
    assert max(len(line) for line in lines) < 500
    assert not any("\x1b" in line for line in lines)  # escaped, as the 4 characters \\x1b
    assert "50 online (cam0/p, cam1/p, " in lines[-1]
    assert "and 30 more" in lines[-1]


def summaries(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("fleet: ")]


@pytest.mark.slow
async def test_summaries_come_on_time_when_the_fleet_is_quiet_and_offline_is_never_live(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every message here is retained and there before the subscriber: they all come at once,
    then nothing. cam9 was killed (its last will said offline; its camera's retained state is
    still live and its count 1); cam2 stopped cleanly; cam1 runs."""
    broker = Mosquitto(tmp_path)
    broker.start()
    quiet_s = 4.5

    async def quiet(runtime: Runtime) -> None:
        await asyncio.sleep(quiet_s)
        runtime.request_stop()

    def retained(device: str, status: str, state: str = "live", reason: str = "") -> list[tuple[str, bytes]]:
        root = f"edgepipe/{device}/face_privacy"
        said = {"v": 1, "kind": "source_state", "source": "camera", "state": state, "reason": reason}
        count = {"v": 1, "kind": "count", "source": "camera", "count": int(state == "live"), "labels": {}}
        return [(f"{root}/status", status.encode()), (f"{root}/camera/source_state", json.dumps(said).encode()),
                (f"{root}/camera/count", json.dumps(count).encode())]  # fmt: skip

    try:
        async with aiomqtt.Client("127.0.0.1", broker.port) as client:
            stopped = retained("cam2", "offline", "stopped", "the pipeline stopped")
            for topic, payload in retained("cam1", "online") + retained("cam9", "offline") + stopped:
                await client.publish(topic, payload, qos=1, retain=True)
        p = load_pipeline(FLEET, ["--broker", broker.url, "--summary-s", "1"])
        with caplog.at_level(logging.INFO):
            report = await run_async(p, RunConfig(governed=False, watchers=[quiet]))
    finally:
        broker.stop()
    assert report.stopped_by == "stop"
    lines = [r.getMessage() for r in caplog.records]
    assert not any(line.startswith("cam9/face_privacy camera: live") for line in lines), lines
    assert "cam9/face_privacy camera: unknown (the pipeline is offline; last said live)" in lines
    assert "cam1/face_privacy camera: live" in lines
    assert "cam2/face_privacy camera: stopped (the pipeline stopped)" in lines  # its reason set apart
    # A summary a second, although nothing came after the first moments: one per second of the
    # run but the first (the subscriber connecting), with generous bounds for a loaded machine.
    said = summaries(caplog)
    assert len(said) >= 3, lines
    gaps = [b.created - a.created for a, b in itertools.pairwise(said)]
    assert all(0.5 <= gap <= 2.5 for gap in gaps), gaps
    last_message = max(r.created for r in caplog.records if r.getMessage().startswith("cam"))
    assert sum(r.created > last_message + 0.5 for r in said) >= 2, gaps
    assert said[-1].getMessage() == (
        "fleet: 1 online (cam1/face_privacy), 2 offline; 0 event(s); detections now: cam1/face_privacy/camera=1"
    )  # cam9's count of 1 is no detection now
