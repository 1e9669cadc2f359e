"""The MQTT sink against a real broker (Debian's Mosquitto) and a real subscriber."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import msgpack
import pytest

from edgepipe import Pipeline
from edgepipe.core.errors import GraphError
from edgepipe.core.install import install_command
from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime.engine import Runtime
from edgepipe.sinks import MqttSink
from edgepipe.testing import FakeSource
from edgepipe.vision import Detection, Detections
from edgepipe.wire.results import Message
from tests.sinks.broker import Mosquitto, free_port, subscribed
from tests.support.cli_process import edgepipe

pytestmark = pytest.mark.slow
ROOT = "edgepipe/cam1/test"
REPO = Path(__file__).resolve().parents[3]


def frame(seq: int, faces: int) -> Detections:
    items = [Detection((10.0, 10.0, 40.0, 50.0), 0.9, 0, "face")] * faces
    return Detections("camera", seq, seq, None, 160, 120, "fake", items, t_decoded_ns=1)


def results() -> list[Any]:
    return [
        {"kind": "source_state", "source": "camera", "state": "connecting", "reason": ""},
        {"kind": "source_state", "source": "camera", "state": "live", "reason": ""},
        frame(0, 0), frame(1, 1), frame(2, 1), frame(3, 2),
        Message("event", {"source": "camera", "what": "person entered"}),
        frame(4, 0),
    ]  # fmt: skip


def results_pipeline(
    url: str, items: list[Any], interval_s: float = 0.02, **options: Any
) -> tuple[Pipeline, MqttSink]:
    p = Pipeline("test")
    src = p.source("results", FakeSource(items, interval_s=interval_s))
    sink = MqttSink(url, options.pop("device", "cam1"), object_name="face", **options)
    p.sink("mqtt", sink, inputs=src, queue_size=16)
    return p, sink


def gauges(report: Any) -> dict[str, Any]:
    return next(n.gauges for n in report.stats.nodes if n.node_id == "mqtt")


async def test_results_arrive_on_their_topics_with_their_qos_and_payloads(mosquitto: Mosquitto) -> None:
    async with subscribed(mosquitto.port) as sub:
        p, _ = results_pipeline(mosquitto.url, results())
        report = await run_async(p, RunConfig(governed=False))
        await sub.wait_for(lambda: sub.on(f"{ROOT}/status")[-1:] and sub.on(f"{ROOT}/status")[-1].payload == b"offline",
                           what="offline at the stop")  # fmt: skip
    detections = [h.json() for h in sub.on(f"{ROOT}/camera/detections")]
    assert [d["seq"] for d in detections] == [0, 1, 2, 3, 4]
    assert [len(d["boxes"]) for d in detections] == [0, 1, 1, 2, 0]
    assert detections[3]["boxes"][0] == [10.0, 10.0, 40.0, 50.0, 0.9, "face", None]
    assert all(d["v"] == 1 and d["source"] == "camera" for d in detections)
    assert {h.qos for h in sub.on(f"{ROOT}/camera/detections")} == {0}
    counts = [h.json()["count"] for h in sub.on(f"{ROOT}/camera/count")]
    assert counts == [0, 1, 2, 0]  # on changes only
    events = sub.on(f"{ROOT}/camera/event")
    assert [h.json()["what"] for h in events] == ["person entered"]
    assert {h.qos for h in events} == {1}
    states = [h.json()["state"] for h in sub.on(f"{ROOT}/camera/source_state")]
    assert states == ["connecting", "live", "stopped"]  # the last: the end state, at the stop
    assert [h.payload for h in sub.on(f"{ROOT}/status")] == [b"online", b"offline"]
    figures = gauges(report)
    assert figures["published"] >= 5 + 4 + 1 + 2 + 2 + 3  # and the discovery configs
    assert (figures["dropped"], figures["connected"], figures["outbox"]) == (0, 0, 0)
    # A subscriber that comes later gets the states, never the detections or events.
    async with subscribed(mosquitto.port) as late:
        await late.wait_for(lambda: len(late.heard) >= 6, what="the retained messages")
        await asyncio.sleep(0.3)
    retained = {h.topic: h for h in late.heard}
    assert all(h.retain for h in late.heard)
    assert retained[f"{ROOT}/status"].payload == b"offline"
    assert retained[f"{ROOT}/camera/count"].json()["count"] == 0
    assert retained[f"{ROOT}/camera/source_state"].json()["state"] == "stopped"
    assert not any(t.endswith(("/detections", "/event")) for t in retained)
    discovery = {t: json.loads(h.payload) for t, h in retained.items() if t.startswith("homeassistant/")}
    assert set(discovery) == {
        "homeassistant/binary_sensor/cam1/test_camera_detected/config",
        "homeassistant/sensor/cam1/test_camera_count/config",
        "homeassistant/sensor/cam1/test_camera_state/config",
    }
    for config in discovery.values():
        assert config["availability_topic"] == f"{ROOT}/status"
        assert config["device"]["identifiers"] == ["edgepipe_cam1_test_camera"]


async def test_msgpack_payloads_carry_the_same_messages(mosquitto: Mosquitto) -> None:
    async with subscribed(mosquitto.port) as sub:
        p, sink = results_pipeline(mosquitto.url, results(), payload="msgpack")
        assert not sink.config.discovers  # Home Assistant reads JSON only
        await run_async(p, RunConfig(governed=False))
        await sub.wait_for(lambda: len(sub.on(f"{ROOT}/status")) >= 2, what="offline at the stop")
    detections = [msgpack.unpackb(h.payload) for h in sub.on(f"{ROOT}/camera/detections")]
    assert [d["seq"] for d in detections] == [0, 1, 2, 3, 4]
    assert msgpack.unpackb(sub.on(f"{ROOT}/camera/event")[0].payload)["what"] == "person entered"
    assert not any(h.topic.startswith("homeassistant/") for h in sub.heard)


async def test_a_broker_down_at_the_start_is_retried_until_it_comes(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    items = [frame(i, i % 2) for i in range(40)]
    p, sink = results_pipeline(broker.url, items, interval_s=0.08, outbox_size=8, backoff_max_s=0.5)
    try:
        async with asyncio.TaskGroup() as group:
            run = group.create_task(run_async(p, RunConfig(governed=False)))
            await asyncio.sleep(1.5)  # the sink retries meanwhile; the results go on (3.2 s of them)
            assert sink.gauges["connected"] == 0
            assert sink.gauges["failures"] >= 2
            broker.start()
            async with subscribed(broker.port) as sub:
                report = await run
                await sub.wait_for(lambda: len(sub.on(f"{ROOT}/status")) >= 2, what="offline at the stop")
    finally:
        broker.stop()
    figures = gauges(report)
    assert figures["reconnects"] == 0  # the first connection, made late
    sent = len(sub.on(f"{ROOT}/camera/detections"))
    assert sent + figures["dropped_detections"] == 40  # every one sent or counted
    assert figures["dropped_detections"] > 0


async def test_a_password_protected_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    broker = Mosquitto(tmp_path, users={"cam": "s3cret", "watcher": "w"})
    broker.start()
    try:
        async with subscribed(broker.port, username="watcher", password="w") as sub:
            wrong = f"mqtt://cam:wrong@127.0.0.1:{broker.port}"
            p, _ = results_pipeline(wrong, results()[:3], backoff_max_s=0.2)
            with caplog.at_level(logging.DEBUG):
                report = await run_async(p, RunConfig(governed=False))
            assert gauges(report)["published"] == 0
            assert gauges(report)["failures"] >= 1
            assert "wrong" not in caplog.text
            assert "cam:***@" in caplog.text
            monkeypatch.setenv("EDGEPIPE_MQTT_USERNAME", "cam")
            monkeypatch.setenv("EDGEPIPE_MQTT_PASSWORD", "s3cret")
            p, _ = results_pipeline(broker.url, results()[:3])
            report = await run_async(p, RunConfig(governed=False))
            await sub.wait_for(lambda: len(sub.on(f"{ROOT}/status")) >= 2, what="offline at the stop")
    finally:
        broker.stop()
    assert gauges(report)["published"] > 0
    assert [h.json()["seq"] for h in sub.on(f"{ROOT}/camera/detections")] == [0]


def test_without_aiomqtt_the_sink_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "aiomqtt" else real(name, *a)
    )
    with pytest.raises(ImportError) as caught:
        MqttSink(f"mqtt://127.0.0.1:{free_port()}")
    assert str(caught.value) == (
        f"the MQTT sink needs the 'aiomqtt' package, which is not installed: {install_command('mqtt')}"
    )


def test_a_pipeline_name_that_cannot_be_a_topic_level_is_refused_when_the_graph_is_checked() -> None:
    # The name comes from the graph now (no pipeline= argument), and is still refused before
    # anything starts: GraphError, exit 2 from `edgepipe run`.
    p = Pipeline("front/door")
    p.sink("mqtt", MqttSink(f"mqtt://127.0.0.1:{free_port()}", "cam"), inputs=p.source("src", FakeSource([])))
    with pytest.raises(
        GraphError, match=r"node 'mqtt': MQTT pipeline name 'front/door' cannot be a topic level"
    ):
        p.validate()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--broker", "tcp://cam:s3cret@127.0.0.1:1883"],
            "MQTT broker URL tcp://cam:***@127.0.0.1:1883: the scheme",
        ),
        (["--broker", "mqtt://127.0.0.1:70000"], "Port out of range"),
        (["--device", "front/door"], "MQTT device 'front/door' cannot be a topic level"),
    ],
)
def test_a_wrong_broker_or_device_stops_the_run_before_it_starts(args: list[str], says: str) -> None:
    done = edgepipe("run", "tests/sinks/mqtt_pipeline.py", *args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert "s3cret" not in done.stderr


async def test_messages_not_delivered_fail_the_run_when_delivery_was_asked_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"  # nothing listens there
    items = [frame(n, n % 2) for n in range(6)] + [Message("event", {"source": "camera", "what": "x"})]
    p, _ = results_pipeline(url, items, interval_s=0.01, discovery=False)
    report = await run_async(p, RunConfig(governed=False))
    # The count (QoS 1, retained: the latest one) and the event (QoS 1) were asked for.
    assert report.failed_sinks == (
        f"sink 'mqtt': 2 messages not delivered to {url} (QoS 1-2: count 1, event 1; 2 still queued at "
        "the stop; and 6 of QoS 0; never connected: [Errno 111] Connection refused)",
    )
    assert report.output_failed  # exit 1
    p, _ = results_pipeline(url, items[:6], interval_s=0.01, discovery=False, qos={"count": 0})
    with caplog.at_level(logging.WARNING):
        report = await run_async(p, RunConfig(governed=False))
    assert report.failed_sinks == ()  # QoS 0 only: said, not a failure
    assert f"7 messages not delivered to {url} (count 1, detections 6: QoS 0, dropped" in caplog.text


async def test_at_the_stop_a_broker_back_meanwhile_gets_what_waits_at_once(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    items = [Message("event", {"source": "camera", "what": f"event {n}"}) for n in range(100)]
    # Its next attempt would be 30 s away: only the one made at the stop can deliver.
    p, sink = results_pipeline(broker.url, items, interval_s=0.1, discovery=False, backoff_initial_s=30,
                               backoff_max_s=30)  # fmt: skip
    listening = asyncio.Event()

    async def stop_when_listening(runtime: Runtime) -> None:
        await listening.wait()
        runtime.request_stop()

    try:
        async with asyncio.TaskGroup() as group:
            run = group.create_task(run_async(p, RunConfig(governed=False, watchers=[stop_when_listening])))
            await asyncio.sleep(0.3)
            assert sink.gauges["failures"] == 1
            broker.start()
            async with subscribed(broker.port) as sub:
                listening.set()
                report = await run
                given = next(n.items_in for n in report.stats.nodes if n.node_id == "mqtt")
                await sub.wait_for(lambda: len(sub.on(f"{ROOT}/camera/event")) == given, what="the events")
    finally:
        broker.stop()
    assert report.failed_sinks == ()
    assert gauges(report)["failures"] == 1
    assert given >= 3
