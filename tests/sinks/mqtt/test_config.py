from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe.sinks.mqtt.config import (
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
