"""Home Assistant MQTT discovery: each camera a device with its detection sensors and its state.

Home Assistant (its MQTT integration, discovery on by default) reads retained JSON configs on
``<discovery_prefix>/<component>/<node_id>/<object_id>/config``; ``node_id`` and ``object_id``
may hold ``[A-Za-z0-9_-]`` only. Per camera (``source``) three entities, grouped as one device:

- ``binary_sensor`` *<Object> detected* (``device_class: occupancy``): ``ON`` while the camera
  sees at least one, read from the retained ``count`` topic;
- ``sensor`` *<Object> count* (``state_class: measurement``), from the same topic;
- ``sensor`` *Camera state* (diagnostic): ``connecting``, ``live``, ``stalled``, ``reconnecting``
  or ``ended``, from the retained ``source_state`` topic.

Each names the pipeline's ``status`` topic as its ``availability_topic`` (``online``/``offline``:
the entities show *unavailable* when the process is gone) and has a ``unique_id`` made of the
device, pipeline and camera, so that it can be renamed in Home Assistant's UI and survives
restarts. The configs are retained and sent again at every connection (a broker restarted
without persistence has forgotten them).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from typing import Any

from edgepipe.sinks.mqtt.config import ha_id
from edgepipe.sinks.mqtt.topics import Publication, Topics


@functools.cache
def version() -> str:
    """edgepipe's version, from the installed package's metadata (what ``pip`` installed; the
    package's top, which exports this module, is not imported from here); ``unknown`` for a
    source tree run without installing it."""
    try:
        return importlib.metadata.version("edgepipe")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def discovery_publications(
    topics: Topics, source: str, *, prefix: str = "homeassistant", object_name: str = "object"
) -> list[Publication]:
    """The three discovery configs of camera ``source`` (see the module docstring)."""
    thing = object_name.strip().capitalize() or "Object"
    base = ha_id("edgepipe", topics.device, topics.pipeline, source)
    node_id = ha_id(topics.device)
    shared: dict[str, Any] = {
        "availability_topic": topics.status,
        "payload_available": "online",
        "payload_not_available": "offline",
        "qos": 1,
        "device": {
            "identifiers": [base],
            "name": f"{source} on {topics.device}",
            "manufacturer": "edgepipe",
            "model": topics.pipeline,
            "sw_version": version(),
        },
        "origin": {"name": "edgepipe", "sw_version": version()},
    }
    count_topic = topics.topic(source, "count")
    entities: list[tuple[str, str, dict[str, Any]]] = [
        ("binary_sensor", "detected", {
            "name": f"{thing} detected",
            "state_topic": count_topic,
            "value_template": "{{ 'ON' if value_json.count > 0 else 'OFF' }}",
            "payload_on": "ON",
            "payload_off": "OFF",
            "device_class": "occupancy",
        }),
        ("sensor", "count", {
            "name": f"{thing} count",
            "state_topic": count_topic,
            "value_template": "{{ value_json.count }}",
            "state_class": "measurement",
        }),
        ("sensor", "state", {
            "name": "Camera state",
            "state_topic": topics.topic(source, "source_state"),
            "value_template": "{{ value_json.state }}",
            "entity_category": "diagnostic",
        }),
    ]  # fmt: skip
    out = []
    for component, what, fields in entities:
        object_id = ha_id(topics.pipeline, source, what)
        config = {**fields, "unique_id": f"{base}_{what}", **shared}
        topic = f"{prefix}/{component}/{node_id}/{object_id}/config"
        out.append(topics.publication(topic, "discovery", json.dumps(config, separators=(",", ":")).encode()))
    return out
