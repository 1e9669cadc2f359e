"""The MQTT sink's connection: another client taking the same client id over and over."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiomqtt
import pytest

import edgepipe.sinks.mqtt.client as mqtt_client
from edgepipe.sinks import MqttSink
from edgepipe.sinks.mqtt.client import Connection
from edgepipe.sinks.mqtt.config import parse_broker_url
from edgepipe.sinks.mqtt.outbox import Outbox
from edgepipe.sinks.mqtt.topics import Topics
from tests.sinks.broker import Mosquitto, subscribed
from tests.sinks.waiting import until

TOLD = "another client uses the same client id edgepipe-cam1-test"


def connection() -> Connection:
    topics = Topics("cam1", "test")
    return Connection(parse_broker_url("mqtt://127.0.0.1:1"), "edgepipe-cam1-test", topics, Outbox(10), list)


def test_a_connection_cut_short_three_times_in_a_minute_is_a_takeover_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conn = connection()
    with caplog.at_level(logging.WARNING):
        conn._lost_after(0.2)
        conn._lost_after(10)  # up a while: neither a cut nor calm
        conn._lost_after(1.0)
        assert not conn.stats.takeover
        for _ in range(5):
            conn._lost_after(0.5)
    assert conn.stats.takeover
    [told] = [r.getMessage() for r in caplog.records]
    assert TOLD in told
    assert "--mqtt-device" in told
    conn._lost_after(61)  # it held a minute: no other client is taking turns
    assert not conn.stats.takeover


def test_a_session_ended_by_a_bug_of_ours_is_no_takeover() -> None:
    conn = connection()
    for _ in range(5):
        conn.stats.connected, conn._t_connected = True, time.monotonic()
        conn._failed(RuntimeError("a bug in the session"))
    assert not conn.stats.takeover
    conn.stats.connected, conn._t_connected = True, time.monotonic()
    conn._failed(aiomqtt.MqttError("Disconnected during message iteration"), dropped=True)
    assert len(conn._cuts) == 1


class _Broker:
    """A client whose connection holds until closed (aiomqtt's Client, as far as a session uses it)."""

    def __init__(self) -> None:
        self.held = asyncio.Event()

    async def __aenter__(self) -> _Broker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def publish(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def messages(self) -> AsyncIterator[Any]:
        async def none() -> AsyncIterator[Any]:
            await self.held.wait()
            yield

        return none()


async def test_a_connection_that_stays_up_ends_the_takeover_while_it_is_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    conn = connection()
    for _ in range(3):
        conn._lost_after(0.5)
    assert conn.stats.takeover
    monkeypatch.setattr(mqtt_client, "TAKEOVER_WINDOW_S", 0.3)  # 60 s in earnest
    monkeypatch.setattr(conn, "_client", _Broker)
    task = asyncio.create_task(conn.run())
    assert await until(lambda: conn.stats.connected, 5)
    assert conn.stats.takeover  # not yet: the other client may take the id back
    with caplog.at_level(logging.INFO, logger="edgepipe.sinks"):
        assert await until(lambda: not conn.stats.takeover, 5)  # old code: only once it is lost
    assert conn.stats.connected
    assert "no other client takes the id edgepipe-cam1-test any more" in caplog.text
    await conn.close(task, 1.0)
    assert task.done()


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_two_sinks_with_one_client_id_are_told_once_and_back_off(
    mosquitto: Mosquitto, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mqtt_client, "TAKEOVER_BACKOFF_S", 2.0, raising=False)  # 30 s in earnest
    sinks = [MqttSink(mosquitto.url, "cam1", discovery=False, backoff_initial_s=0.1, backoff_max_s=0.4)
             for _ in range(2)]  # fmt: skip
    for sink in sinks:  # outside a pipeline: its name is given, not learnt at start
        sink.name_pipeline("test")
    async with subscribed(mosquitto.port, ("edgepipe/cam1/test/status",)) as sub:
        with caplog.at_level(logging.INFO, logger="edgepipe.sinks"):
            for sink in sinks:  # one process, then another started a little later
                await sink.start()
                await asyncio.sleep(0.3)
            await asyncio.sleep(4)
            gauges = [sink.gauges for sink in sinks]
            for sink in sinks:
                await sink.stop()
    told = [r.getMessage() for r in caplog.records if TOLD in r.getMessage()]
    assert 1 <= len(told) <= 2, told  # once per sink at most (each may see it)
    assert "--mqtt-device" in told[0]
    assert any(g["takeover"] == 1 for g in gauges), gauges
    # Without the backoff the two take the id from each other every 0.1-0.4 s (some 14 times in
    # 4 s); with it, a few times before it is seen, then once per 2 s each (some 7 in all).
    connects = sum(sink.connection.stats.connects for sink in sinks if sink.connection is not None)
    assert connects <= 10, (connects, [h.payload for h in sub.heard])
    lost = [r for r in caplog.records if "lost the MQTT broker" in r.getMessage()]
    assert len(lost) <= 6, len(lost)  # said before it is seen, not after
