"""What the shipped pipelines add for ``--mqtt URL`` and ``--events-dir DIR``: one call, so the
three of them (face privacy, scene descriptions, the demo) wire the sinks the same way::

    events = add_mqtt_and_events(p, mqtt=mqtt, events_dir=events_dir, frames=pixelated,
                                 triggers=faces, results=[faces], live=live)

``frames`` are the pipeline's *output* pictures (for face privacy the pixelated ones, never the
camera's): the event clips hold what a viewer or a recording gets. ``triggers`` start a clip
(detections of ``labels`` scored at least ``min_score``; the ``stalled`` state of a source
upstream too). The sinks learn the pipeline's name and the sources' states from the graph.
The ``event`` messages of the clips go to the MQTT sink with ``results`` and to the log. With
both arguments empty nothing is added: no node, no file, no connection.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from edgepipe.graph.pipeline import Pipeline
from edgepipe.graph.spec import Input, NodeRef
from edgepipe.wire.results import Message

log = logging.getLogger("edgepipe.sinks")


async def log_recording(message: Message) -> None:
    """One log line per event clip saved (or removed)."""
    data = message.data if isinstance(message.data, dict) else {}
    if message.kind == "event" and data.get("what") == "recording" and data.get("state") != "start":
        error = f"; {data['error']}" if data.get("error") else ""
        log.info("event clip %s: %s (%.1f s, %s frames, trigger %s%s)", data.get("state"), data.get("path"),
                 data.get("duration_s") or 0.0, data.get("frames"),
                 (data.get("trigger") or {}).get("reason", ""), error)  # fmt: skip


def add_mqtt_and_events(
    p: Pipeline,
    *,
    mqtt: str,
    events_dir: str,
    frames: NodeRef,
    triggers: NodeRef | None,
    results: Sequence[NodeRef],
    live: bool,
    labels: Collection[str] = ("face",),
    min_score: float = 0.5,
    object_name: str = "face",
    device: str = "",
) -> NodeRef | None:
    """Adds an :class:`~edgepipe.sinks.EventRecorder` stage (with ``events_dir``) and an
    :class:`~edgepipe.sinks.MqttSink` (with ``mqtt``) to ``p``; returns the recorder's node, if
    any. ``live``: frames reach the recorder through a ``latest`` lane (a slow encoder skips
    frames, never holds the camera back); a file's go through a ``block`` lane (every frame).

    Raises ``ValueError`` for a setting that cannot work (at declaration: exit 2)."""
    events: NodeRef | None = None
    if events_dir:
        from edgepipe.sinks.events.recorder import EventRecorder
        from edgepipe.sinks.events.trigger import Trigger

        if triggers is None:
            raise ValueError(
                f"events_dir: event clips start on a {object_name}, and this run detects none "
                "(give a detector, or no events_dir)"
            )
        recorder = EventRecorder(events_dir, trigger=Trigger(labels=set(labels), min_score=min_score))
        lane = Input(frames, "latest", 2) if live else Input(frames, "block", 8)
        events = p.stage("events", recorder, inputs={"frames": lane, "triggers": triggers}, queue_size=16)
        p.sink("event_log", log_recording, inputs=events, queue_size=16)
    if mqtt:
        from edgepipe.sinks.mqtt.sink import MqttSink

        sink = MqttSink(mqtt, device or None, object_name=object_name)
        inputs = [*results, *([events] if events is not None else [])]
        p.sink("mqtt", sink, inputs=inputs, queue_size=16)
    return events
