"""Where a pipeline's results and pictures go besides the viewers: an MQTT broker
(:class:`MqttSink`), event recordings with pre-roll (:class:`EventRecorder`), msgpack and
JSON-lines streams.

Nothing heavy is imported until it is used: ``import edgepipe.sinks`` loads no client library;
each class loads its module on first use (and aiomqtt only when the MQTT sink starts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgepipe.core.lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from edgepipe.sinks.events.recorder import EventRecorder
    from edgepipe.sinks.events.trigger import Trigger
    from edgepipe.sinks.mqtt.config import MqttConfig
    from edgepipe.sinks.mqtt.sink import MqttSink
    from edgepipe.sinks.mqtt.source import FleetFeed
    from edgepipe.sinks.streams import JsonLines, TcpStream, UdpStream
    from edgepipe.sinks.wiring import add_mqtt_and_events

__all__ = [
    "EventRecorder",
    "FleetFeed",
    "JsonLines",
    "MqttConfig",
    "MqttSink",
    "TcpStream",
    "Trigger",
    "UdpStream",
    "add_mqtt_and_events",
]

_HOMES = {
    "EventRecorder": "edgepipe.sinks.events.recorder",
    "FleetFeed": "edgepipe.sinks.mqtt.source",
    "add_mqtt_and_events": "edgepipe.sinks.wiring",
    "MqttConfig": "edgepipe.sinks.mqtt.config",
    "MqttSink": "edgepipe.sinks.mqtt.sink",
    "JsonLines": "edgepipe.sinks.streams",
    "TcpStream": "edgepipe.sinks.streams",
    "UdpStream": "edgepipe.sinks.streams",
    "Trigger": "edgepipe.sinks.events.trigger",
}


__getattr__, __dir__ = _lazy_exports(__name__, _HOMES)
