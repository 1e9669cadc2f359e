"""Where results go besides the viewers: an MQTT broker (:class:`MqttSink`).

Nothing heavy is imported until it is used: ``import edgepipe.sinks`` loads no client library;
:class:`MqttSink` loads its module on first use (and aiomqtt only when it starts).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgepipe.sinks.mqtt import MqttSink

__all__ = ["MqttSink"]

_HOMES = {
    "MqttSink": "edgepipe.sinks.mqtt",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
