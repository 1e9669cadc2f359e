from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from edgepipe.sinks import MqttSink
from edgepipe.sinks.mqtt.config import (
    MqttConfig,
    MqttConfigError,
    checked_level,
    client_id,
    default_device,
    ha_id,
    parse_broker_url,
    topic_level,
)


def test_a_plain_url_names_host_and_default_port() -> None:
    broker = parse_broker_url("mqtt://127.0.0.1", env={})
    assert (broker.host, broker.port, broker.tls, broker.username, broker.password) == (
        "127.0.0.1",
        1883,
        False,
        None,
        None,
    )
    assert parse_broker_url("mqtts://broker.lan", env={}).port == 8883
    assert parse_broker_url("MQTT://broker.lan:1884/", env={}).port == 1884


def test_credentials_come_from_the_url_first_then_the_environment() -> None:
    env = {"EDGEPIPE_MQTT_USERNAME": "envuser", "EDGEPIPE_MQTT_PASSWORD": "envpass"}
    broker = parse_broker_url("mqtt://cam:p%40ss%2Fw@broker:1883", env=env)
    assert (broker.username, broker.password) == ("cam", "p@ss/w")
    broker = parse_broker_url("mqtt://broker", env=env)
    assert (broker.username, broker.password) == ("envuser", "envpass")
    broker = parse_broker_url("mqtt://cam@broker", env=env)  # a user without password: the env's
    assert (broker.username, broker.password) == ("cam", "envpass")


def test_the_password_is_never_shown() -> None:
    broker = parse_broker_url("mqtts://cam:s3cret@broker:8884", env={})
    assert broker.shown == "mqtts://cam:***@broker:8884"
    assert "s3cret" not in repr(broker)
    with pytest.raises(MqttConfigError) as caught:
        parse_broker_url("http://cam:s3cret@broker", env={})
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "empty"),
        ("tcp://broker:1883", "mqtt:// or mqtts://"),
        ("ssl://broker", "mqtts://"),
        ("broker.lan:1883", "mqtt:// or mqtts://"),
        ("mqtt://broker:99999", "Port out of range"),
        ("mqtt://broker:http", "Port could not be cast"),
        ("mqtt://broker:0", "port 0"),
        ("mqtt://:1883", "no host"),
        ("mqtt://broker/topic", "no path"),
        ("mqtt://broker?keepalive=5", "unknown option 'keepalive'"),
        ("mqtt://broker?ca=/etc/ssl/ca.pem", "?ca= is for TLS"),
        ("mqtts://broker?ca=/nonexistent/ca.pem", "does not exist"),
    ],
)
def test_a_wrong_url_is_refused_naming_it(url: str, says: str) -> None:
    with pytest.raises(MqttConfigError, match="MQTT broker URL") as caught:
        parse_broker_url(url, env={})
    assert says in str(caught.value)


def test_a_ca_file_is_kept_for_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    assert parse_broker_url(f"mqtts://broker?ca={ca}", env={}).ca_file == str(ca)


def test_names_become_safe_topic_levels_and_home_assistant_ids() -> None:
    assert topic_level("rtsp://cam/1 +#$") == "rtsp___cam_1____"
    assert topic_level("") == "_"
    assert ha_id("edgepipe", "cam.1", "face privacy") == "edgepipe_cam_1_face_privacy"
    assert checked_level("device", "cam-1.lan_2") == "cam-1.lan_2"
    for bad in ("a/b", "cam+", "#", "", "with space"):
        with pytest.raises(MqttConfigError, match="cannot be a topic level"):
            checked_level("device", bad)
    assert topic_level(default_device()) == default_device()


def test_the_client_id_is_one_per_device_and_pipeline() -> None:
    ids = {client_id(d, p) for d in ("cam1", "cam2") for p in ("face_privacy", "describe_scene")}
    assert len(ids) == 4


def test_the_device_comes_from_edgepipe_device_then_the_host_name() -> None:
    assert default_device({"EDGEPIPE_DEVICE": "cam2"}) == "cam2"
    assert default_device({"EDGEPIPE_DEVICE": ""}) == default_device({})
    with pytest.raises(MqttConfigError, match="EDGEPIPE_DEVICE"):  # set on purpose: never changed
        default_device({"EDGEPIPE_DEVICE": "cam/2"})


def test_the_sinks_keywords_are_its_configs_fields() -> None:
    fields = [f.name for f in dataclasses.fields(MqttConfig) if f.init]
    assert list(inspect.signature(MqttSink).parameters) == fields
    sink = MqttSink("mqtt://127.0.0.1:1", "cam1", payload="msgpack", qos={"event": 2})
    assert sink.config == MqttConfig("mqtt://127.0.0.1:1", "cam1", payload="msgpack", qos={"event": 2})
    assert MqttSink.from_config(sink.config).config == sink.config
    assert sink.topics.policy("event").qos == 2


def test_a_config_shows_no_password_and_keeps_its_tables_frozen() -> None:
    qos = {"event": 2}
    config = MqttConfig("mqtt://cam:s3cret@127.0.0.1:1884", "cam1", qos=qos)
    qos["event"] = 0
    assert config.qos == {"event": 2}
    assert "s3cret" not in repr(config)
    assert "mqtt://cam:***@127.0.0.1:1884" in repr(config)
    assert config.broker.password == "s3cret"
    with pytest.raises(TypeError):
        config.qos["event"] = 1  # type: ignore[index]


def test_discovery_and_the_first_backoff_follow_the_other_settings() -> None:
    assert MqttConfig("mqtt://h").discovers
    assert not MqttConfig("mqtt://h", payload="msgpack").discovers
    assert not MqttConfig("mqtt://h", discovery=False).discovers
    assert MqttConfig("mqtt://h").first_backoff_s == 0.5
    assert MqttConfig("mqtt://h", backoff_max_s=0.2).first_backoff_s == 0.2
    assert MqttConfig("mqtt://h", backoff_initial_s=2, backoff_max_s=4).first_backoff_s == 2.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "tcp://h"}, "the scheme must be mqtt:// or mqtts://"),
        (
            {"url": "127.0.0.1:18830"},
            "MQTT broker URL 127.0.0.1:18830 has no scheme, and it must be mqtt:// or mqtts://: write mqtt://127.0.0.1:18830 (or mqtts://127.0.0.1:18830 for TLS)",
        ),
        (
            {"url": "broker.local:1883"},
            "has no scheme, and it must be mqtt:// or mqtts://: write mqtt://broker.local:1883 ",
        ),
        ({"device": "front/door"}, "MQTT device 'front/door' cannot be a topic level"),
        ({"prefix": "a/b"}, "MQTT topic prefix 'a/b' cannot be a topic level"),
        ({"payload": "msgpack", "discovery": True}, "Home Assistant discovery needs JSON payloads"),
        ({"keepalive_s": 2}, "MQTT keepalive_s must be an integer of 5-65535 seconds, not 2"),
        (
            {"backoff_initial_s": 0.5, "backoff_max_s": -1},
            "MQTT backoff_max_s must be a number of seconds above 0, not -1",
        ),
        ({"payload": "xml"}, "MQTT payload format must be 'json' or 'msgpack', not 'xml'"),
        ({"qos": {"event": 3}}, "MQTT QoS of 'event' must be 0, 1 or 2, not 3"),
        ({"outbox_size": 0}, "the MQTT outbox size must be an integer of at least 1, not 0"),
    ],
)
def test_settings_that_cannot_work_are_refused_at_declaration(
    kwargs: dict[str, object], message: str
) -> None:
    kwargs = {"url": "mqtt://127.0.0.1", **kwargs}
    with pytest.raises(MqttConfigError, match=re.escape(message)):
        MqttConfig(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(MqttConfigError, match=re.escape(message)):
        MqttSink(**kwargs)  # type: ignore[arg-type]
