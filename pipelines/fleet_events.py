"""A fleet's events in one place: every camera publishing to one MQTT broker, followed live.

    edgepipe run pipelines/fleet_events.py --broker mqtt://127.0.0.1:1883
    edgepipe run pipelines/fleet_events.py --broker mqtts://broker.lan --results fleet.jsonl

Subscribes to what every pipeline with an ``MqttSink`` publishes (``edgepipe/+/+/status``, and
each camera's ``event``, ``count`` and ``source_state``), logs one line per change (a camera
online or offline, its state, an event) and a summary of the fleet every ``--summary-s``
seconds. With ``--results`` each message is also a JSON line (``kind`` ``fleet_status``,
``fleet_event``, ``fleet_count`` or ``fleet_state``, with ``device``, ``pipeline`` and
``source``). The broker being away is not an error: the subscriber reconnects by itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from edgepipe import Message, Pipeline, Range
from edgepipe.sinks.mqtt_config import parse_broker_url

log = logging.getLogger("fleet_events")


class FleetFeed:
    """A source: the fleet's messages from the broker, as ``Message("fleet_<kind>", {...})``."""

    def __init__(self, broker: str, prefix: str = "edgepipe") -> None:
        self.broker = parse_broker_url(broker)  # a wrong URL: exit 2 before anything starts
        self.prefix = prefix

    async def __aiter__(self) -> AsyncIterator[Message]:
        import ssl

        import aiomqtt

        tls = ssl.create_default_context(cafile=self.broker.ca_file) if self.broker.tls else None
        topics = [f"{self.prefix}/+/+/status"] + [
            f"{self.prefix}/+/+/+/{k}" for k in ("event", "count", "source_state")
        ]
        warned = False
        while True:
            try:
                async with aiomqtt.Client(self.broker.host, self.broker.port, username=self.broker.username,
                                          password=self.broker.password, tls_context=tls,
                                          max_queued_incoming_messages=1000) as client:  # fmt: skip
                    log.info("following the fleet on %s", self.broker.shown)
                    warned = False
                    for topic in topics:
                        await client.subscribe(topic, qos=1)
                    async for message in client.messages:
                        parsed = self._parse(str(message.topic), message.payload)
                        if parsed is not None:
                            yield parsed
            except aiomqtt.MqttError as exc:
                if not warned:
                    log.warning("MQTT broker %s: %s; retrying", self.broker.shown, exc)
                    warned = True
                await asyncio.sleep(2.0)

    def _parse(self, topic: str, payload: Any) -> Message | None:
        levels = topic.split("/")
        raw = payload if isinstance(payload, bytes) else str(payload).encode()
        if len(levels) == 4 and levels[3] == "status":
            return Message(
                "fleet_status", {"device": levels[1], "pipeline": levels[2], "status": raw.decode()}
            )
        if len(levels) != 5:
            return None
        try:
            data = json.loads(raw)
        except ValueError:  # msgpack payloads: this example reads JSON only
            return None
        where = {"device": levels[1], "pipeline": levels[2], "source": levels[3]}
        return Message(f"fleet_{levels[4].removeprefix('source_')}", {**where, **data})


class FleetLog:
    """A sink: one log line per change, and a summary every ``summary_s`` seconds."""

    def __init__(self, summary_s: float) -> None:
        self.summary_s = summary_s
        self.status: dict[str, str] = {}
        self.events: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self._last_summary = time.monotonic()

    def process(self, message: Message) -> None:
        data = message.data
        device = f"{data['device']}/{data['pipeline']}"
        if message.kind == "fleet_status":
            if self.status.get(device) != data["status"]:
                log.info("%s is %s", device, data["status"])
            self.status[device] = data["status"]
        elif message.kind == "fleet_event":
            self.events[device] = self.events.get(device, 0) + 1
            log.info("%s %s: %s", device, data["source"], data.get("what") or data.get("text") or "event")
        elif message.kind == "fleet_count":
            self.counts[f"{device}/{data['source']}"] = int(data.get("count", 0))
        elif message.kind == "fleet_state":
            log.info("%s %s: %s %s", device, data["source"], data.get("state"), data.get("reason") or "")
        if time.monotonic() - self._last_summary >= self.summary_s:
            self._last_summary = time.monotonic()
            online = sorted(d for d, s in self.status.items() if s == "online")
            log.info("fleet: %d online (%s), %d offline; %d event(s); detections now: %s", len(online),
                     ", ".join(online), len(self.status) - len(online), sum(self.events.values()),
                     ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items())) or "none")  # fmt: skip


def pipeline(
    broker: str = "mqtt://127.0.0.1:1883",
    prefix: str = "edgepipe",
    summary_s: Annotated[float, Range(1)] = 10.0,
) -> Pipeline:
    """broker -> a log of the fleet (and --results).

    Args:
        broker: the MQTT broker the cameras publish to: mqtt://HOST[:PORT] or mqtts://HOST[:PORT]
            (credentials in the URL or EDGEPIPE_MQTT_USERNAME/EDGEPIPE_MQTT_PASSWORD).
        prefix: the topic prefix the cameras publish under.
        summary_s: log a summary of the fleet this often (seconds).
    """
    p = Pipeline("fleet_events")
    feed = p.source("broker", FleetFeed(broker, prefix))
    p.sink("fleet", FleetLog(summary_s), inputs=feed, queue_size=64, blocking=False)
    return p
