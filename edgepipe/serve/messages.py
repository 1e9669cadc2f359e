"""The messages of the WebRTC data channel ``results``: the msgpack schema ``v`` 1 lives in
:mod:`edgepipe.sinks.messages` (the MQTT sink and the streams speak it too, and a lower layer
cannot import ``serve``); this module names it where the viewers' code looks for it."""

from __future__ import annotations

from edgepipe.sinks.messages import (
    SCHEMA_VERSION,
    detections_message,
    message_of,
    pack,
    pts_90k,
    sync_message,
    unpack,
    wall_ms,
)

__all__ = [
    "SCHEMA_VERSION",
    "detections_message",
    "message_of",
    "pack",
    "pts_90k",
    "sync_message",
    "unpack",
    "wall_ms",
]
