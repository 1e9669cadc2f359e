"""The line that says what an MQTT sink did not deliver: how many, of which kinds, and when."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgepipe.sinks import MqttSink
from edgepipe.sinks.mqtt import outbox as mqtt_outbox
from edgepipe.wire.results import Message

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def _events(sink: MqttSink, n: int) -> None:
    for i in range(n):
        sink.put(Message("event", {"source": "camera", "what": f"event {i}"}))


def test_the_line_tells_an_old_outage_from_the_current_one(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [T0]
    monkeypatch.setattr(mqtt_outbox, "time", SimpleNamespace(time=lambda: now[0]), raising=False)
    sink = MqttSink("mqtt://127.0.0.1:1", "cam1", discovery=False, outbox_size=2)
    _events(sink, 3)  # an outage: one dropped
    now[0] = T0 + 3600
    _events(sink, 1)  # still out an hour later: another
    assert sink.failed_output == (
        "4 messages not delivered to mqtt://127.0.0.1:1 (QoS 1-2: event 4; 2 still queued at the stop; "
        "2 dropped from the full outbox between 2023-11-14T22:13:20Z and 2023-11-14T23:13:20Z)"
    )  # old code: "(QoS 1-2: event 4; 2 dropped from the full outbox)", no time, none said queued
    while sink.outbox.take() is not None:  # the broker came back: the queue went out
        pass
    assert sink.failed_output == (
        "2 messages not delivered to mqtt://127.0.0.1:1 (QoS 1-2: event 2; 2 dropped from the full "
        "outbox between 2023-11-14T22:13:20Z and 2023-11-14T23:13:20Z)"
    )


def test_one_drop_is_said_with_its_time_and_qos_0_drops_are_not_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [T0]
    monkeypatch.setattr(mqtt_outbox, "time", SimpleNamespace(time=lambda: now[0]), raising=False)
    sink = MqttSink("mqtt://127.0.0.1:1", "cam1", discovery=False, outbox_size=1,
                    qos={"event": 0, "source_state": 1})  # fmt: skip
    _events(sink, 3)  # QoS 0: dropped, not asked for
    assert sink.failed_output is None
    now[0] = T0 + 60
    for camera in ("front", "back"):  # the second one takes the first one's place
        sink.put({"kind": "source_state", "source": camera, "state": "stalled", "reason": ""})
    sink.outbox.take()
    assert sink.failed_output == (
        "1 message not delivered to mqtt://127.0.0.1:1 (QoS 1-2: source_state 1; 1 dropped from the "
        "full outbox at 2023-11-14T22:14:20Z; and 3 of QoS 0)"
    )
