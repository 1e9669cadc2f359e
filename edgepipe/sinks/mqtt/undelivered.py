"""What an :class:`~edgepipe.sinks.MqttSink` did not deliver, and how the end of the run says it.

A message is undelivered when it is still in the outbox at the stop (after the flush) or was
dropped from it when full, at any time during the run. Those of a kind with QoS 1 or 2 (events,
states, counts, discovery: delivery was asked for) fail the run (exit 1) with one line::

    5 messages not delivered to mqtt://HOST:PORT (QoS 1-2: event 5; 2 still queued at the stop;
    3 dropped from the full outbox between 2025-03-01T10:00:04Z and 2025-03-01T10:12:40Z; ...)

which says how many the stop found waiting (an outage now) and how many were dropped during the
run and when (UTC), so that an outage weeks ago is told from the current one. QoS 0 ones (each
frame's detections) are a warning line, never a failure.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

from edgepipe.sinks.mqtt.outbox import Outbox
from edgepipe.sinks.mqtt.topics import Topics

if TYPE_CHECKING:  # it imports aiomqtt, which the sink checks for when it is made
    from edgepipe.sinks.mqtt.client import ConnectionStats


def undelivered(outbox: Outbox, topics: Topics) -> tuple[Counter[str], Counter[str]]:
    """``(asked, best_effort)``: the messages not delivered (left in the outbox, or dropped
    from it when full), by kind; ``asked`` those of a kind with QoS 1 or 2."""
    lost = outbox.waiting() + outbox.dropped
    asked = Counter({kind: n for kind, n in lost.items() if topics.policy(kind).qos >= 1})
    return asked, lost - asked


def failed_line(
    outbox: Outbox, topics: Topics, broker: str, client_id: str, stats: ConnectionStats | None
) -> str | None:
    """The messages of QoS 1 or 2 not delivered to ``broker`` (as shown), in one line; None
    when every one was."""
    asked, best_effort = undelivered(outbox, topics)
    if not asked:
        return None
    queued = sum(n for kind, n in outbox.waiting().items() if kind in asked)
    dropped = sum(n for kind, n in outbox.dropped.items() if kind in asked)
    error = f"last error: {stats.last_error}" if stats is not None and stats.last_error else ""
    if stats is not None and stats.takeover:
        error = f"another client used the client id {client_id} (give each its own --mqtt-device)"
    elif error and stats is not None and not stats.connects:
        error = f"never connected: {stats.last_error}"
    why = [
        f"QoS 1-2: {by_kind(asked)}",
        f"{queued} still queued at the stop" if queued else "",
        f"{dropped} dropped from the full outbox {_when(outbox.dropped_asked_t)}" if dropped else "",
        f"and {sum(best_effort.values())} of QoS 0" if best_effort else "",
        error,
    ]
    return f"{messages(asked)} not delivered to {broker} ({'; '.join(w for w in why if w)})"


def best_effort_line(outbox: Outbox, topics: Topics, broker: str) -> str | None:
    """The warning for messages of QoS 0 only not delivered (not a failure); None otherwise."""
    asked, best_effort = undelivered(outbox, topics)
    if asked or not best_effort:
        return None  # asked for: the run's error line (failed_line) says them all
    return (f"{messages(best_effort)} not delivered to {broker} ({by_kind(best_effort)}: QoS 0, dropped "
            "without failing the run)")  # fmt: skip


def _when(span: tuple[float, float] | None) -> str:
    if span is None:
        return ""
    first, last = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) for t in span)
    return f"at {first}" if first == last else f"between {first} and {last}"


def messages(counts: Counter[str]) -> str:
    n = sum(counts.values())
    return f"{n} message" if n == 1 else f"{n} messages"


def by_kind(counts: Counter[str]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
