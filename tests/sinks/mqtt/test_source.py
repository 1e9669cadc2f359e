from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiomqtt
import pytest

from edgepipe.sinks.mqtt.config import MqttConfigError
from edgepipe.sinks.mqtt.source import INBOX_BYTES, MAX_PAYLOAD_BYTES, BadMessage, FleetFeed, parse
from edgepipe.sinks.mqtt.topics import Topics
from edgepipe.wire.results import Message

ROOT = "edgepipe/cam1/face_privacy"


def test_what_an_mqtt_sink_publishes_reads_back_with_the_topics_names() -> None:
    topics = Topics("cam1", "face_privacy")
    for item, kind in [
        (Message("event", {"source": "camera", "what": "a face"}), "fleet_event"),
        (topics.count_message("camera", {"face": 2}), "fleet_count"),
        ({"kind": "source_state", "source": "camera", "state": "live", "reason": ""}, "fleet_state"),
    ]:
        _, pub = topics.of_item(item)
        parsed = parse(pub.topic, pub.payload)
        assert isinstance(parsed, Message), parsed
        assert parsed.kind == kind
        assert (parsed.data["device"], parsed.data["pipeline"], parsed.data["source"]) == (
            "cam1", "face_privacy", "camera")  # fmt: skip
    status = parse(topics.status, topics.status_publication(online=False).payload)
    assert status == Message("fleet_status", {"device": "cam1", "pipeline": "face_privacy", "status": "offline"},
                             t=status.t)  # fmt: skip


@pytest.mark.parametrize(
    ("topic", "payload", "fault"),
    [
        (f"{ROOT}/status", b"\xff\xfe\xfa", "not_utf8"),
        (f"{ROOT}/status", b"exploded", "unknown_status"),
        (f"{ROOT}/camera/event", b"5", "not_object"),
        (f"{ROOT}/camera/event", b'["a"]', "not_object"),
        (f"{ROOT}/camera/event", b"{not json", "not_json"),
        (f"{ROOT}/camera/event", b'{"what": NaN}', "not_json"),
        (f"{ROOT}/camera/event", b"[" * 60_000, "not_json"),  # past Python's recursion limit
        (f"{ROOT}/camera/event", b'{"what": "' + b"x" * 10_000_000 + b'"}', "too_large"),
        (f"{ROOT}/camera/event", b'{"device": 1, "pipeline": null}', "contradicts_topic"),
        (f"{ROOT}/camera/event", b'{"pipeline": "other"}', "contradicts_topic"),
        (f"{ROOT}/camera/event", b'{"kind": "detections"}', "contradicts_topic"),
        (f"{ROOT}/camera/count", b'{"count": "many"}', "bad_field"),
        (f"{ROOT}/camera/count", b'{"count": -1}', "bad_field"),
        (f"{ROOT}/camera/count", b'{"count": true}', "bad_field"),
        (f"{ROOT}/camera/source_state", b'{"state": 3}', "bad_field"),
        ("edgepipe/cam1/status", b"online", "bad_topic"),  # a level short
        (f"{ROOT}/a/b/event", b"{}", "bad_topic"),  # a level too many
        ("edgepipe//face_privacy/status", b"online", "bad_topic"),  # an empty device
        ("edgepipe/cam\x1b[2J/face_privacy/status", b"online", "bad_topic"),
        ("other/cam1/face_privacy/status", b"online", "bad_topic"),
        (f"{ROOT}/camera/detections", b"{}", "bad_topic"),  # a kind the feed does not follow
    ],
)
def test_a_bad_message_is_named_never_raised(topic: str, payload: bytes, fault: str) -> None:
    parsed = parse(topic, payload)
    assert isinstance(parsed, BadMessage), parsed
    assert parsed.fault == fault, parsed


def test_the_topic_names_device_pipeline_and_source_whatever_the_payload_says() -> None:
    payload = json.dumps({"device": "cam1", "source": "rtsp://cam/1", "what": "x"}).encode()
    parsed = parse(f"{ROOT}/camera/event", payload)
    assert isinstance(parsed, Message)
    assert (parsed.data["device"], parsed.data["pipeline"], parsed.data["source"]) == (
        "cam1", "face_privacy", "camera")  # fmt: skip


def test_bad_messages_are_counted_logged_once_per_fault_and_briefly(caplog: pytest.LogCaptureFixture) -> None:
    feed = FleetFeed("mqtt://127.0.0.1:1")
    huge = b'{"what": "' + b"x" * 10_000_000 + b'"}'
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert feed.take(f"{ROOT}/status", b"\xff\xfe\xfa", retained=True) is None
            assert feed.take(f"{ROOT}/camera/event", huge) is None
        assert feed.take(f"{ROOT}/status", b"online") is not None
    assert feed.bad == {"not_utf8": 3, "too_large": 3}
    assert feed._gauges["bad_messages"] == 6
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # once per fault
    assert all(ROOT in line for line in lines)
    assert max(len(line) for line in lines) < 600  # a preview, never the 10 MB
    assert "10000012 bytes" in lines[1]


def test_a_retained_state_sent_again_after_a_reconnect_is_not_news() -> None:
    feed = FleetFeed("mqtt://127.0.0.1:1")
    assert feed.take(f"{ROOT}/status", b"online", retained=True) is not None
    assert feed.take(f"{ROOT}/status", b"online", retained=True) is None  # the broker's copy again
    assert feed.take(f"{ROOT}/status", b"online") is not None  # published anew: passed on
    assert feed.take(f"{ROOT}/status", b"offline", retained=True) is not None
    assert feed.repeated == 1


def test_a_prefix_of_several_levels_is_refused_at_declaration() -> None:
    with pytest.raises(MqttConfigError, match="topic prefix 'site/edgepipe' cannot be a topic level"):
        FleetFeed("mqtt://127.0.0.1", "site/edgepipe")


class _Ended(Exception):
    pass


async def _inbox(monkeypatch: pytest.MonkeyPatch, feed: FleetFeed) -> asyncio.Queue[Any]:
    """The queue the feed gives aiomqtt for the messages it receives (made as aiomqtt makes it)."""
    made: list[asyncio.Queue[Any]] = []

    class Client:
        def __init__(
            self, *args: Any, queue_type: Any, max_queued_incoming_messages: int, **kwargs: Any
        ) -> None:
            made.append(queue_type(maxsize=max_queued_incoming_messages))

        async def __aenter__(self) -> None:
            raise _Ended  # the inbox is made: the test fills it as paho's callback would

        async def __aexit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(aiomqtt, "Client", Client)
    with pytest.raises(_Ended):
        await anext(aiter(feed))
    return made[0]


def _received(payload: bytes, topic: str = f"{ROOT}/camera/event") -> aiomqtt.Message:
    return aiomqtt.Message(topic, payload, qos=1, retain=False, mid=1, properties=None)


async def test_a_payload_over_the_limit_is_a_bad_message_before_it_is_queued(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    feed = FleetFeed("mqtt://127.0.0.1:1")
    inbox = await _inbox(monkeypatch, feed)
    huge = b'{"what": "' + b"x" * 10_000_000 + b'"}'
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            inbox.put_nowait(_received(huge))
    assert inbox.qsize() == 0  # old code: each queued whole (10,000 of them: 100 GB)
    assert feed.bad == {"too_large": 3}
    assert feed._gauges["bad_messages"] == 3
    [line] = [r.getMessage() for r in caplog.records]
    assert ROOT in line
    assert "10000012 bytes" in line
    assert len(line) < 600
    inbox.put_nowait(_received(b'{"what": "a face"}'))
    assert inbox.qsize() == 1


async def test_the_inbox_holds_a_bounded_number_of_payload_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    feed = FleetFeed("mqtt://127.0.0.1:1")
    inbox = await _inbox(monkeypatch, feed)
    payload = b"{}" + b" " * (MAX_PAYLOAD_BYTES - 2)  # the largest a message may be
    fit = INBOX_BYTES // MAX_PAYLOAD_BYTES
    for _ in range(fit + 20):
        inbox.put_nowait(_received(payload))
    assert inbox.qsize() == fit  # old code: every one (10,000 of them: 640 MB)
    assert feed.dropped == 20
    inbox.get_nowait()  # the pipeline takes one: room for one more
    inbox.put_nowait(_received(payload))
    assert (inbox.qsize(), feed.dropped) == (fit, 20)
