"""Reading a fleet back: what every :class:`~edgepipe.sinks.MqttSink` publishes, from the broker.

:class:`FleetFeed` is a source: it subscribes to ``<prefix>/+/+/status`` and each camera's
``event``, ``count`` and ``source_state`` (:mod:`~edgepipe.sinks.mqtt.topics`) and yields one
``Message("fleet_<kind>", {...})`` per message: ``fleet_status`` (``status``: ``online`` or
``offline``), ``fleet_event``, ``fleet_count`` (``count``: an integer of at least 0) and
``fleet_state`` (``state``: a string), each with ``device``, ``pipeline`` and (but status)
``source``. The broker being away is not an error: it reconnects by itself.

The topic is the source of truth: ``device``, ``pipeline`` and ``source`` come from its levels,
whatever the payload says. Anything else on those topics is a bad message (:func:`parse`): a
payload over :data:`MAX_PAYLOAD_BYTES`, not UTF-8, not JSON, JSON that is not an object, a
``device``, ``pipeline`` or ``kind`` field that contradicts the topic, a wrong field (a count
that is no count), a status other than ``online``/``offline``, a topic with a level no
``MqttSink`` writes. Each is counted (the node's ``bad_messages`` gauge in ``--stats``), the
first of each fault logged with its topic and a preview of at most :data:`PREVIEW_BYTES`, and
skipped: the source never fails, so it never subscribes again for a message and never gets the
retained ones twice because of one.

A retained message the feed has already passed on, sent again by the broker after a reconnect,
is skipped (``repeated``). Messages received wait in a bounded inbox (:class:`Inbox`) until the
pipeline takes them: a payload over :data:`MAX_PAYLOAD_BYTES` is a bad message (``too_large``)
before it is queued, and messages the broker sends faster than the pipeline takes them, beyond
:data:`INBOX_SIZE` waiting or :data:`INBOX_BYTES` of payloads, are dropped and counted
(``dropped``; logged once). The inbox never holds more than :data:`INBOX_BYTES` of payloads,
whatever the publishers send.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from edgepipe.core.context import current_node
from edgepipe.sinks.mqtt.config import checked_level, parse_broker_url, topic_level
from edgepipe.wire.results import Message

log = logging.getLogger(__name__)

KINDS = ("event", "count", "source_state")
"""The per-camera kinds followed (besides each pipeline's ``status``)."""
STATUS_WORDS = ("online", "offline")
MAX_PAYLOAD_BYTES = 64 * 1024
"""A payload above this is a bad message (the sink's events, counts and states are far smaller)."""
PREVIEW_BYTES = 60
"""At most this much of a bad payload (and 120 characters of its topic) is logged."""
INBOX_SIZE = 10_000
"""Messages received and not yet taken by the pipeline (a few MB of the sink's messages, each
under 1 KiB); more are dropped and counted. Every retained message comes at once when the feed
subscribes: some 4 per camera."""
INBOX_BYTES = 32 * 1024 * 1024
"""Payload bytes received and not yet taken: :data:`INBOX_SIZE` of the sink's messages fit
three times over, while 10,000 payloads just under :data:`MAX_PAYLOAD_BYTES` (640 MB) do not."""
MAX_REMEMBERED = 4096
"""Topics whose last payload is remembered (a retained one the broker resends is then skipped)."""
FAULTS = {
    "too_large": f"a payload over {MAX_PAYLOAD_BYTES // 1024} KiB",
    "not_utf8": "a payload that is not UTF-8 text (msgpack? this feed reads JSON payloads)",
    "not_json": "a payload that is not JSON",
    "not_object": "a JSON payload that is not an object",
    "contradicts_topic": "a payload field that contradicts the topic",
    "bad_field": "a payload field of the wrong type",
    "unknown_status": "a status other than online/offline",
    "bad_topic": "a topic no MqttSink publishes",
}
"""Every fault of a bad message, with what it means in a log line."""


@dataclass(frozen=True, slots=True)
class BadMessage:
    """Why one message was skipped: a key of :data:`FAULTS` and the detail."""

    fault: str
    detail: str


def parse(topic: str, payload: bytes, prefix: str = "edgepipe") -> Message | BadMessage:
    """The fleet message of one MQTT message, or why it is a bad one. Never raises."""
    rest = topic.removeprefix(f"{prefix}/") if topic.startswith(f"{prefix}/") else None
    levels = rest.split("/") if rest is not None else []
    kind = levels[-1] if levels else ""
    if not ((len(levels) == 3 and kind == "status") or (len(levels) == 4 and kind in KINDS)):
        return BadMessage("bad_topic", f"expected {prefix}/DEVICE/PIPELINE/status or "
                                       f"{prefix}/DEVICE/PIPELINE/SOURCE/{{{','.join(KINDS)}}}")  # fmt: skip
    for level in levels[:-1]:
        if topic_level(level) != level:  # empty, or a character an MqttSink never writes
            return BadMessage("bad_topic", f"level {level!r} is no device, pipeline or source name")
    if len(payload) > MAX_PAYLOAD_BYTES:
        return BadMessage("too_large", f"{len(payload)} bytes")
    try:
        text = payload.decode()
    except UnicodeDecodeError as exc:
        return BadMessage("not_utf8", f"{exc.reason} at byte {exc.start}")
    where = {"device": levels[0], "pipeline": levels[1]}
    if kind == "status":
        if text.strip() not in STATUS_WORDS:  # the sink writes no space; a hand-made "online\n" is fine
            return BadMessage("unknown_status", _short(repr(text), 40))
        return Message("fleet_status", {**where, "status": text.strip()})
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # RecursionError: [[[[… nested past Python's limit
        return BadMessage("not_json", str(exc)[:80])
    if not isinstance(data, dict):
        return BadMessage("not_object", f"a JSON {type(data).__name__}")
    for name, value in (*where.items(), ("kind", kind)):
        if name in data and data[name] != value:
            said = _short(repr(data[name]), 40)
            return BadMessage("contradicts_topic", f"{name} {said} on the topic of {value!r}")
    if kind == "count":
        count = data.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return BadMessage("bad_field", f"count {_short(repr(count), 40)} is no number of detections")
    if kind == "source_state" and not isinstance(data.get("state"), str):
        return BadMessage("bad_field", f"state {_short(repr(data.get('state')), 40)} is no state")
    # The topic wins: a payload's own source (a camera URL, say) became this level when published.
    return Message(f"fleet_{kind.removeprefix('source_')}", {**data, **where, "source": levels[2]})


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…"


def preview(payload: bytes) -> str:
    """At most :data:`PREVIEW_BYTES` of ``payload``, escaped (a log line stays one short line)."""
    head = repr(payload[:PREVIEW_BYTES])
    return head if len(payload) <= PREVIEW_BYTES else f"{head}… ({len(payload)} bytes)"


class FleetFeed:
    """A source: the fleet's messages from the broker (see the module docstring)."""

    def __init__(self, broker: str, prefix: str = "edgepipe") -> None:
        """Raises :class:`~edgepipe.sinks.mqtt.config.MqttConfigError` (a ``ValueError``) for a
        broker URL or prefix that cannot work: at declaration, before anything starts."""
        self.broker = parse_broker_url(broker)
        self.prefix = checked_level("topic prefix", prefix)
        self.bad: Counter[str] = Counter()
        """Bad messages skipped, by fault (:data:`FAULTS`)."""
        self.repeated = 0
        self.dropped = 0
        self._seen: dict[str, bytes] = {}
        """Retained topic -> digest of the last payload passed on."""
        self._gauges: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"FleetFeed({self.broker.shown!r}, prefix={self.prefix!r})"

    @property
    def topics(self) -> list[str]:
        return [f"{self.prefix}/+/+/status"] + [f"{self.prefix}/+/+/+/{kind}" for kind in KINDS]

    def take(self, topic: str, payload: bytes, retained: bool = False) -> Message | None:
        """The message to pass on, or None (a bad message, counted and logged once per fault;
        a retained one already passed on)."""
        parsed = parse(topic, payload, self.prefix)
        if isinstance(parsed, BadMessage):
            self.skip(topic, payload, parsed)
            return None
        # A reconnect makes the broker send every retained message again: one already passed on
        # (the same payload on its topic) is not news.
        digest = hashlib.blake2b(payload, digest_size=16).digest()
        if retained and self._seen.get(topic) == digest:
            self.repeated += 1
            self._report()
            return None
        if topic in self._seen or len(self._seen) < MAX_REMEMBERED:
            self._seen[topic] = digest
        return parsed

    def skip(self, topic: str, payload: bytes, bad: BadMessage) -> None:
        """Count a bad message (the first of its fault logged, with a preview of its payload)."""
        self.bad[bad.fault] += 1
        if self.bad[bad.fault] == 1:
            log.warning("skipped a bad MQTT message on %s: %s (%s); payload %s. Further ones are "
                        "counted in the 'bad_messages' gauge", _short(ascii(topic), 120),
                        FAULTS[bad.fault], bad.detail, preview(payload))  # fmt: skip
        self._report()

    def _report(self) -> None:
        self._gauges.update(bad_messages=sum(self.bad.values()), repeated=self.repeated, dropped=self.dropped)

    def _dropped_one(self) -> None:
        self.dropped += 1
        if self.dropped == 1:
            log.warning("the broker sends more than the pipeline takes (%d messages or %d MiB waiting); "
                        "the excess is dropped and counted in the 'dropped' gauge", INBOX_SIZE,
                        INBOX_BYTES >> 20)  # fmt: skip
        self._report()

    async def __aiter__(self) -> AsyncIterator[Message]:
        import ssl

        import aiomqtt

        with contextlib.suppress(RuntimeError):  # outside a pipeline (a unit test): its own gauges
            self._gauges = current_node().gauges
        self._report()
        feed = self

        class FeedInbox(Inbox):
            owner = feed

        tls = ssl.create_default_context(cafile=self.broker.ca_file) if self.broker.tls else None
        warned = False
        while True:
            try:
                async with aiomqtt.Client(self.broker.host, self.broker.port, username=self.broker.username,
                                          password=self.broker.password, tls_context=tls,
                                          queue_type=FeedInbox,
                                          max_queued_incoming_messages=INBOX_SIZE) as client:  # fmt: skip
                    log.info("following the fleet on %s", self.broker.shown)
                    warned = False
                    for topic in self.topics:
                        await client.subscribe(topic, qos=1)
                    async for message in client.messages:
                        raw = message.payload
                        payload = raw if isinstance(raw, bytes) else str(raw).encode()
                        parsed = self.take(str(message.topic), payload, bool(message.retain))
                        if parsed is not None:
                            yield parsed
            except aiomqtt.MqttError as exc:
                if not warned:
                    log.warning("MQTT broker %s: %s; retrying", self.broker.shown, exc)
                    warned = True
                await asyncio.sleep(2.0)


def _size(payload: Any) -> int:
    return len(payload) if isinstance(payload, bytes | bytearray | str) else 0


class Inbox(asyncio.Queue[Any]):
    """aiomqtt's queue of messages received (its ``queue_type``; a subclass names the
    :class:`FleetFeed` as ``owner``), bounded in messages and in payload bytes. A payload over
    :data:`MAX_PAYLOAD_BYTES` is a bad message, counted before it is queued; one that does not
    fit is dropped and counted (neither is logged each time, as aiomqtt would)."""

    owner: FleetFeed

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize)
        self.payload_bytes = 0
        """The payloads waiting, in bytes (at most :data:`INBOX_BYTES`)."""

    def put_nowait(self, item: Any) -> None:
        payload = getattr(item, "payload", None)
        size = _size(payload)
        if size > MAX_PAYLOAD_BYTES:  # said before it takes room (aiomqtt queues whole payloads)
            whole = payload if isinstance(payload, bytes) else str(payload).encode()
            self.owner.skip(str(getattr(item, "topic", "")), whole, BadMessage("too_large", f"{size} bytes"))
            return
        if self.full() or self.payload_bytes + size > INBOX_BYTES:
            self.owner._dropped_one()
            return
        super().put_nowait(item)

    def _put(self, item: Any) -> None:
        super()._put(item)
        self.payload_bytes += _size(getattr(item, "payload", None))

    def _get(self) -> Any:
        item = super()._get()
        self.payload_bytes -= _size(getattr(item, "payload", None))
        return item
