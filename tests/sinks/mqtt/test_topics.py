from __future__ import annotations

import json

import msgpack
import pytest

from edgepipe.sinks.mqtt.topics import NO_SOURCE, Topics
from edgepipe.vision import Detection, Detections
from edgepipe.wire.messages import message_of
from edgepipe.wire.results import Message


def detections(source: str = "camera", n: int = 1) -> Detections:
    items = [Detection((1.0, 2.0, 3.0, 4.0), 0.9, 0, "face", track_id=7)] * n
    return Detections(source, 42, 0, None, 640, 360, "m", items, t_decoded_ns=1)


def test_results_go_under_device_pipeline_source_kind() -> None:
    topics = Topics("cam1", "face_privacy")
    source, pub = topics.of_item(detections())
    assert (source, pub.topic) == ("camera", "edgepipe/cam1/face_privacy/camera/detections")
    assert topics.status == "edgepipe/cam1/face_privacy/status"
    _, pub = topics.of_item(Message("event", {"what": "description", "text": "a face"}))
    assert pub.topic == f"edgepipe/cam1/face_privacy/{NO_SOURCE}/event"
    _, pub = topics.of_item(Message("event", {"source": "rtsp://u:secret@cam/1", "what": "clip"}))
    assert pub.topic == "edgepipe/cam1/face_privacy/rtsp___u_____cam_1/event"  # no password, one level


def test_the_json_payload_is_the_data_channel_message_with_a_time() -> None:
    item = detections()
    _, pub = Topics("cam1", "p").of_item(item)
    payload = json.loads(pub.payload)
    expected = message_of(item)
    assert payload == {**expected, "t_ms": payload["t_ms"]}
    assert payload["boxes"] == [[1.0, 2.0, 3.0, 4.0, 0.9, "face", 7]]
    _, pub = Topics("cam1", "p").of_item(Message("event", {"what": "x"}, t=1.5))
    assert json.loads(pub.payload)["t_ms"] > 0


def test_msgpack_payloads_are_the_data_channel_schema() -> None:
    item = detections()
    _, pub = Topics("cam1", "p", payload="msgpack").of_item(item)
    message = msgpack.unpackb(pub.payload)
    assert message["v"] == 1
    assert message["kind"] == "detections"
    assert message["boxes"] == [[1.0, 2.0, 3.0, 4.0, 0.9, "face", 7]]


def test_each_kind_has_its_qos_retain_and_rank_and_they_can_be_changed() -> None:
    topics = Topics("cam1", "p")
    table = {k: (topics.policy(k).qos, topics.policy(k).retain) for k in
             ("status", "source_state", "engine_state", "count", "event", "detections", "token", "anything")}  # fmt: skip
    assert table == {"status": (1, True), "source_state": (1, True), "engine_state": (1, True), "count": (1, True),
                     "event": (1, False), "detections": (0, False), "token": (0, False),
                     "anything": (0, False)}  # fmt: skip
    assert topics.policy("detections").rank < topics.policy("event").rank < topics.policy("source_state").rank
    changed = Topics("cam1", "p", qos={"detections": 1}, retain={"event": True})
    assert changed.policy("detections").qos == 1
    assert changed.policy("event").retain


def test_wrong_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="0, 1 or 2"):
        Topics("cam1", "p", qos={"event": 3})
    with pytest.raises(ValueError, match="'json' or 'msgpack'"):
        Topics("cam1", "p", payload="xml")  # type: ignore[arg-type]
