"""What an MQTT sink publishes: topics, payloads, and each kind's QoS, retain flag and value.

Topics (every level made safe by :func:`~edgepipe.sinks.mqtt.config.topic_level`)::

    edgepipe/<device>/<pipeline>/status                 online / offline (retained; the last will)
    edgepipe/<device>/<pipeline>/<source>/<kind>        one result: detections, count, event,
                                                        source_state, token, ...

``<source>`` is the camera a result is about (a :class:`~edgepipe.vision.Detections`'
``source_id``, a message's ``source`` field); a result about no one camera (a description of
several) goes under :data:`NO_SOURCE`.

Payloads are the messages of the WebRTC data channel (:mod:`edgepipe.wire.messages`, schema
``v`` 1): msgpack bytes with ``format="msgpack"``, the same map as JSON text by default, with
``t_ms`` (wall-clock Unix milliseconds) added where the message has none. ``engine_state``
(retained) is a remote language-model engine's circuit, sent by ``Describe`` when it changes.
``count`` is this sink's own kind: ``{"v": 1, "kind": "count", "source": ..., "count": N,
"labels": {label: n}, "t_ms": ...}``, sent when a camera's number of detections changes (what
Home Assistant's sensors read). ``status`` is the plain text ``online`` or ``offline`` in either format.

A stop publishes the end state of each retained topic the sink wrote (:func:`end_message`),
before ``offline``, so that whoever reads the broker later (a subscriber, Home Assistant) finds
no camera still ``live`` with a face counted: ``source_state`` -> ``stopped`` (a source that
``ended`` by itself keeps it), ``count`` -> ``0`` with no labels, ``engine_state`` -> ``stopped``.
The discovery configs stay (they describe the entities, which ``status`` makes unavailable); a
kind retained through ``retain={...}`` keeps its last message (its end state is not known here).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edgepipe.sinks.mqtt.config import PayloadFormat, checked_payload, checked_qos, topic_level
from edgepipe.wire.messages import message, message_of, pack
from edgepipe.wire.redact import redact_text
from edgepipe.wire.results import to_jsonable

NO_SOURCE = "all"
"""The ``<source>`` level of a result that names no camera."""


@dataclass(frozen=True, slots=True)
class KindPolicy:
    """How one kind of message is published."""

    qos: int
    """0: at most once (cheap; a frame's detections, superseded by the next frame's); 1: at
    least once (acknowledged by the broker)."""
    retain: bool
    """The broker keeps the last one for subscribers that come later (a state, not an event)."""
    rank: int
    """Its value when the outbox is full: the oldest message of the lowest rank goes first."""


DEFAULT_POLICIES: dict[str, KindPolicy] = {
    "status": KindPolicy(qos=1, retain=True, rank=5),
    "discovery": KindPolicy(qos=1, retain=True, rank=5),
    "source_state": KindPolicy(qos=1, retain=True, rank=4),
    "engine_state": KindPolicy(qos=1, retain=True, rank=4),
    "event": KindPolicy(qos=1, retain=False, rank=3),
    "count": KindPolicy(qos=1, retain=True, rank=3),
    "error": KindPolicy(qos=1, retain=False, rank=3),
    "detections": KindPolicy(qos=0, retain=False, rank=0),
    "token": KindPolicy(qos=0, retain=False, rank=0),
}
OTHER_POLICY = KindPolicy(qos=0, retain=False, rank=1)
"""Every kind not in :data:`DEFAULT_POLICIES`."""
STOPPED = "stopped"
"""The state a stop leaves on a camera's ``source_state`` and an engine's ``engine_state``."""
STOPPED_WHY = "the pipeline stopped"
FINAL_STATES = ("ended", STOPPED)
"""A camera's states that are final already: a stop publishes no other."""
ENDING_KINDS = ("source_state", "count", "engine_state")
"""The retained kinds with an end state (:func:`end_message`)."""


def end_message(last: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a stop publishes on the topic whose latest message was ``last`` (a kind of
    :data:`ENDING_KINDS`), or None when ``last`` is its end state already (see the module
    docstring)."""
    kind, source = last.get("kind"), last.get("source")
    where = {"source": source} if source is not None else {}
    if kind == "source_state":
        if last.get("state") in FINAL_STATES:
            return None
        node = {"node": last["node"]} if last.get("node") is not None else {}
        return message("source_state", **node, **where, state=STOPPED, reason=STOPPED_WHY)
    if kind == "count":
        return None if last.get("count") == 0 else message("count", **where, count=0, labels={})
    if kind == "engine_state":
        if last.get("state") == STOPPED:
            return None
        return message("engine_state", **where, engine=last.get("engine"), state=STOPPED, cause=STOPPED_WHY)
    return None


@dataclass(frozen=True, slots=True)
class Publication:
    """One message ready to go: what ``client.publish()`` takes, and what the outbox weighs."""

    topic: str
    payload: bytes
    kind: str
    qos: int
    retain: bool
    rank: int


class Topics:
    """The topics and payloads of one sink (one device, one pipeline)."""

    def __init__(
        self,
        device: str,
        pipeline: str,
        *,
        prefix: str = "edgepipe",
        payload: PayloadFormat = "json",
        qos: Mapping[str, int] | None = None,
        retain: Mapping[str, bool] | None = None,
    ) -> None:
        """``qos`` and ``retain`` override :data:`DEFAULT_POLICIES` by kind. Raises
        :class:`~edgepipe.sinks.mqtt.config.MqttConfigError` (a ``ValueError``) for a QoS outside
        0-2 or a format other than json and msgpack."""
        checked_payload(payload)
        checked_qos(qos)
        self.device = device
        self.prefix = prefix
        self.pipeline = ""
        self.root = ""
        self.status = ""
        """The availability topic: ``online`` while connected, ``offline`` (the last will) after."""
        self.name_pipeline(pipeline)
        self.payload = payload
        self._qos = dict(qos or {})
        self._retain = dict(retain or {})
        self._policies: dict[str, KindPolicy] = {}

    def name_pipeline(self, pipeline: str) -> None:
        """Topics of the pipeline ``pipeline`` from now on (the sink learns its name at start)."""
        self.pipeline = pipeline
        self.root = f"{self.prefix}/{self.device}/{pipeline}"
        self.status = f"{self.root}/status"

    def policy(self, kind: str) -> KindPolicy:
        policy = self._policies.get(kind)
        if policy is None:
            base = DEFAULT_POLICIES.get(kind, OTHER_POLICY)
            policy = KindPolicy(self._qos.get(kind, base.qos), self._retain.get(kind, base.retain), base.rank)
            if len(self._policies) < 256:  # kinds are few; a stream of odd ones must not grow it
                self._policies[kind] = policy
        return policy

    def topic(self, source: str, kind: str) -> str:
        return f"{self.root}/{topic_level(redact_text(source))}/{topic_level(kind)}"

    def publication(self, topic: str, kind: str, payload: bytes) -> Publication:
        policy = self.policy(kind)
        return Publication(topic, payload, kind, policy.qos, policy.retain, policy.rank)

    def status_publication(self, online: bool) -> Publication:
        return self.publication(self.status, "status", b"online" if online else b"offline")

    def of_item(self, item: Any) -> tuple[str, Publication]:
        """``(source, publication)`` of one result the sink was given."""
        return self.of_message(message_of(item))

    def of_message(self, message: dict[str, Any]) -> tuple[str, Publication]:
        """``(source, publication)`` of one data-channel message (see the module docstring)."""
        kind = str(message.get("kind") or "message")
        source = message.get("source")
        source = source if isinstance(source, str) and source else NO_SOURCE
        if message.get("t_ms") is None:
            message["t_ms"] = round(time.time() * 1000, 1)
        return source, self.publication(self.topic(source, kind), kind, self.encode(message))

    def end_publication(
        self, topic: str, last: Mapping[str, Any]
    ) -> tuple[dict[str, Any], Publication] | None:
        """``(message, publication)`` of the end state of ``topic``, whose latest message was
        ``last`` (:func:`end_message`); None when ``last`` is its end state already."""
        end = end_message(last)
        if end is None:
            return None
        end["t_ms"] = round(time.time() * 1000, 1)
        return end, self.publication(topic, str(end["kind"]), self.encode(end))

    def count_message(self, source: str, labels: dict[str, int]) -> dict[str, Any]:
        return message("count", source=source, count=sum(labels.values()), labels=labels)

    def encode(self, message: dict[str, Any]) -> bytes:
        if self.payload == "msgpack":
            return pack(message)
        return json.dumps(message, default=_jsonable, separators=(",", ":")).encode()


def _jsonable(value: Any) -> Any:
    converted = to_jsonable(value)
    return repr(value) if converted is value else converted
