from __future__ import annotations

import json
import re

import edgepipe
from edgepipe.sinks.mqtt.discovery import discovery_publications
from edgepipe.sinks.mqtt.topics import Topics

HA_TOPIC = re.compile(r"^homeassistant/(binary_sensor|sensor)/[A-Za-z0-9_-]+/[A-Za-z0-9_-]+/config$")


def test_each_camera_gets_a_detected_sensor_a_count_and_its_state() -> None:
    topics = Topics("cam.1", "face_privacy")
    pubs = discovery_publications(topics, "front door", object_name="face")
    assert all(HA_TOPIC.match(p.topic) for p in pubs), [p.topic for p in pubs]
    assert all(p.retain and p.qos == 1 for p in pubs)
    configs = {
        p.topic.split("/")[1] + ":" + json.loads(p.payload)["name"]: json.loads(p.payload) for p in pubs
    }
    assert set(configs) == {"binary_sensor:Face detected", "sensor:Face count", "sensor:Camera state"}
    detected = configs["binary_sensor:Face detected"]
    assert detected["state_topic"] == "edgepipe/cam.1/face_privacy/front_door/count"
    assert detected["device_class"] == "occupancy"
    assert (
        configs["sensor:Camera state"]["state_topic"] == "edgepipe/cam.1/face_privacy/front_door/source_state"
    )
    for config in configs.values():
        assert config["availability_topic"] == "edgepipe/cam.1/face_privacy/status"
        assert (config["payload_available"], config["payload_not_available"]) == ("online", "offline")
        assert config["device"]["identifiers"] == ["edgepipe_cam_1_face_privacy_front_door"]
        assert config["device"]["manufacturer"] == "edgepipe"
        assert config["device"]["sw_version"] == config["origin"]["sw_version"] == edgepipe.__version__
    unique = {c["unique_id"] for c in configs.values()}
    assert len(unique) == 3
    other = discovery_publications(Topics("cam2", "face_privacy"), "front door")
    assert unique.isdisjoint(json.loads(p.payload)["unique_id"] for p in other)  # another device: its own


def test_the_templates_read_the_count_and_state_payloads() -> None:
    # Home Assistant renders these with Jinja; what they read must be in the payloads.
    pubs = discovery_publications(Topics("cam1", "p"), "camera")
    templates = " ".join(json.loads(p.payload)["value_template"] for p in pubs)
    assert "value_json.count" in templates
    assert "value_json.state" in templates
    topics = Topics("cam1", "p")
    _, count = topics.of_message(topics.count_message("camera", {"face": 2}))
    assert json.loads(count.payload)["count"] == 2
