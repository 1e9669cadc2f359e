"""A fleet's events in one place: every camera publishing to one MQTT broker, followed live.

    edgepipe run pipelines/fleet_events.py --broker mqtt://127.0.0.1:1883
    edgepipe run pipelines/fleet_events.py --broker mqtts://broker.lan --results fleet.jsonl

Subscribes to what every pipeline with an ``MqttSink`` publishes (``edgepipe/+/+/status``, and
each camera's ``event``, ``count`` and ``source_state``), logs one line per change (a camera
online or offline, its state, an event) and a summary of the fleet every ``--summary-s``
seconds, on a timer of its own: a fleet gone quiet is summed up as often as a busy one.

``status`` comes first: a camera of a pipeline whose status is ``offline`` is not said to be in
the state its pipeline last published (a process killed without a stop leaves its cameras'
retained states ``live``; only its last will says ``offline``): its line reads
``cam1/face_privacy camera: unknown (the pipeline is offline; last said live)``, and the
summary counts none of its detections. A pipeline that stopped says so itself before it goes:
``stopped``, a count of 0, then ``offline`` (see docs/mqtt.md).

With ``--results`` each message is also a JSON line, as the broker sent it (``kind``
``fleet_status``, ``fleet_event``, ``fleet_count`` or ``fleet_state``, with ``device``,
``pipeline`` and ``source``, taken from the topic). The broker being away is not an error: the
subscriber reconnects by itself. A message that cannot be read (not JSON, a field that
contradicts its topic, ...) is skipped, counted (``bad_messages`` in ``--stats``) and logged
once per fault: see :mod:`edgepipe.sinks.mqtt.source`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

from edgepipe import Message, Pipeline, Range
from edgepipe.sinks import FleetFeed

log = logging.getLogger("fleet_events")

MAX_FOLLOWED = 4096
"""Pipelines (and cameras) whose state the summary keeps; more are logged, not summed up."""
LISTED = 20
"""Online pipelines named in a summary line; the rest are counted."""
FINAL_STATES = ("stopped", "ended")
"""A camera's states that stay true once its pipeline is offline (a stop publishes ``stopped``)."""


def shown(value: Any, limit: int = 200) -> str:
    """``value`` for a log line: one line of at most ``limit`` characters, control characters
    escaped (a payload's terminal escape sequence never reaches the terminal)."""
    text = " ".join(str(value)[: 2 * limit].split())  # a newline is a space
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else f"{text[:limit]}…"


def listed(names: list[str]) -> str:
    """The first :data:`LISTED` of ``names``, and how many more."""
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return ", ".join(names[:LISTED]) + more


class FleetLog:
    """A sink: one log line per change, and a summary every ``summary_s`` seconds (a task of
    its own, in a TaskGroup that ``start()`` enters and ``stop()`` leaves: the node's task owns
    it, as the run's TaskGroup owns the node's)."""

    on_loop = True
    """Cheap (a table update, a line per change): it runs on the event loop, not a thread per call."""

    def __init__(self, summary_s: float) -> None:
        self.summary_s = summary_s
        self.status: dict[str, str] = {}
        self.events: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.unfollowed = 0
        self._group: asyncio.TaskGroup | None = None
        self._timer: asyncio.Task[None] | None = None

    async def start(self) -> None:
        group = asyncio.TaskGroup()
        await group.__aenter__()
        self._group = group
        self._timer = group.create_task(self._summaries(), name="fleet:summaries")

    async def stop(self) -> None:
        group, self._group = self._group, None
        if group is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        await group.__aexit__(None, None, None)

    async def _summaries(self) -> None:
        # On a schedule, not a sleep after each line: summaries stay summary_s apart, without drift.
        due = time.monotonic() + self.summary_s
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            self.log_summary()
            due = max(due + self.summary_s, time.monotonic())  # a loop held up: no burst after it

    def log_summary(self) -> None:
        log.info("fleet: %s", self.summary())

    def _keep(self, table: dict[str, Any], key: str, value: Any) -> bool:
        # Bounded: a broker with a million retained topics must not grow the process by as much.
        if key in table or len(table) < MAX_FOLLOWED:
            table[key] = value
            return True
        self.unfollowed += 1
        if self.unfollowed == 1:
            log.warning("following %d pipelines and cameras already; the rest are left out of the "
                        "summary and their status lines", MAX_FOLLOWED)  # fmt: skip
        return False

    def process(self, message: Message) -> None:
        data = message.data  # checked by FleetFeed: device, pipeline, source from the topic
        device = f"{data['device']}/{data['pipeline']}"
        if message.kind == "fleet_status":
            before = self.status.get(device)
            if self._keep(self.status, device, data["status"]) and before != data["status"]:
                log.info("%s is %s", device, data["status"])
        elif message.kind == "fleet_event":
            self._keep(self.events, device, self.events.get(device, 0) + 1)
            what = data.get("what") or data.get("text") or "event"
            log.info("%s %s: %s", device, data["source"], shown(what))
        elif message.kind == "fleet_count":
            self._keep(self.counts, f"{device}/{data['source']}", data["count"])
        elif message.kind == "fleet_state":
            reason = data.get("reason")
            said = shown(data["state"], 40) + (f" ({shown(reason)})" if reason else "")
            if self.status.get(device) == "offline" and data["state"] not in FINAL_STATES:
                # A state its pipeline can no longer vouch for: it was killed, not stopped.
                said = f"unknown (the pipeline is offline; last said {said})"
            log.info("%s %s: %s", device, data["source"], said)

    def summary(self) -> str:
        online = sorted(d for d, s in self.status.items() if s == "online")
        offline = {d for d, s in self.status.items() if s == "offline"}
        now = [f"{k}={v}" for k, v in sorted(self.counts.items()) if k.rsplit("/", 1)[0] not in offline]
        counts = listed(now) or "none"
        return (f"{len(online)} online ({listed(online)}), {len(self.status) - len(online)} offline; "
                f"{sum(self.events.values())} event(s); detections now: {counts}")  # fmt: skip


def pipeline(
    broker: str = "mqtt://127.0.0.1:1883",
    prefix: str = "edgepipe",
    summary_s: Annotated[float, Range(1)] = 10.0,
) -> Pipeline:
    """broker -> a log of the fleet (and --results).

    Args:
        broker: the MQTT broker the cameras publish to: mqtt://HOST[:PORT] or mqtts://HOST[:PORT]
            (credentials in the URL or EDGEPIPE_MQTT_USERNAME/EDGEPIPE_MQTT_PASSWORD).
        prefix: the topic prefix the cameras publish under (one topic level).
        summary_s: log a summary of the fleet this often (seconds).
    """
    p = Pipeline("fleet_events")
    feed = p.source("broker", FleetFeed(broker, prefix))
    p.sink("fleet", FleetLog(summary_s), inputs=feed, queue_size=64)
    return p
