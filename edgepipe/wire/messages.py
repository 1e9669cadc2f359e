"""The msgpack messages, schema ``v`` 1: what the WebRTC data channel ``results``, the
``TcpStream`` and ``UdpStream`` sinks and MQTT's payloads carry, one map per message (the JSON
lines of ``--results`` are :mod:`edgepipe.wire.results`; ``docs/protocol.md`` describes both).

Every message is a msgpack map with ``v`` (the schema version, :data:`SCHEMA_VERSION`) and
``kind``. A client ignores kinds it does not know and refuses a ``v`` it does not know.

``detections`` (one per analysed frame, empty ones too, so a client can clear its boxes)::

    {"v": 1, "kind": "detections", "source": "cam", "seq": 42, "pts_90k": 123456,
     "t_ms": 1764683001250.5, "latency_ms": 12.5, "inferred": true, "w": 640, "h": 360,
     "boxes": [[x1, y1, x2, y2, score, label, track_id], ...]}

    boxes are in the source frame's pixels (w x h); label is a string; track_id an int, or nil
    when no tracker follows the object. ``t_ms`` is the wall-clock time (Unix ms) when the frame
    left the decoder, the capture time edgepipe knows; ``latency_ms`` is from then to these
    results (nil when unknown); ``inferred`` is false when the model skipped the frame and the
    boxes are the tracker's prediction.

``sync`` (once per viewer per track, before that track's first ``detections``)::

    {"v": 1, "kind": "sync", "source": "cam", "first_pts_90k": 120000, "rtp_offset": 2716443991}

``source_state`` (a source connected, stalled, reconnected or ended; a viewer also gets each
source's latest state when its channel opens)::

    {"v": 1, "kind": "source_state", "node": "camera", "source": "camera", "state": "live",
     "reason": ""}

``token`` (a piece of a language model's streamed text) and ``event`` (anything that happened:
a description finished, a node failed)::

    {"v": 1, "kind": "token", "request": 3, "text": " a"}
    {"v": 1, "kind": "event", "what": "description", "text": "...", ...}

Any other result (a ``Message(kind, data)``, a dict with a ``kind``, an object) becomes
``{"v": 1, "kind": kind, "node": node, **data}`` when its data is a map, else
``{"v": 1, "kind": kind, "node": node, "data": data}``: the same kinds and payloads as the
JSON lines of ``--results`` (:mod:`edgepipe.wire.results`). ``node`` (the node that emitted
it) is there when it is known: the runtime's own messages (``source_state``, a node's
``error``) always say it.

A viewer may send one message itself, on any data channel: ``{"v": 1, "kind": "keyframe"}``
(``"source"`` optional) asks for an IDR soon (:mod:`edgepipe.serve.inbound`); anything else it
sends is dropped and counted.

Alignment with the video: aiortc starts each sender's RTP clock at a random offset, so a
client cannot read pts off RTP timestamps directly. ``pts_90k`` is the frame's time on the
track's 90 kHz timeline (:func:`pts_90k`, the pts of the H.264 packet sent for that frame) and
``first_pts_90k`` is the pts of the first packet sent to this viewer on that track;
``rtp_offset`` is that sender's ``(rtp - pts) mod 2**32``. A frame's pts is then
``first_pts_90k + (rtp - rtp_offset - first_pts_90k) mod 2**32`` for its RTP timestamp ``rtp``,
and a message belongs to the frame whose pts equals its ``pts_90k``. Where ``rtp_offset`` is
missing (the sender's clock could not be read), the RTP timestamp ``rtp0`` of the first frame
the client received stands in for ``first_pts_90k + rtp_offset``: ``pts = first_pts_90k + (rtp -
rtp0) mod 2**32``, right as long as that frame was the first sent (a lost first keyframe makes
it wrong by the gap, hence the offset).
Messages that carry a ``pts_90k`` wait for their track's ``sync``, which goes once the first
video packet of that source has gone out to the viewer (its RTP clock is known then): the
results of a viewer's first frame or two are not sent to it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any, Protocol, TypeGuard

import msgpack

from edgepipe.wire.redact import redact, redact_text
from edgepipe.wire.results import message_parts, to_jsonable

SCHEMA_VERSION = 1
"""The ``v`` of every message; raised when a field changes meaning or goes away."""


class Box(Protocol):
    """One detection, as a ``detections`` message reads it (a
    :class:`~edgepipe.vision.detection.Detection`)."""

    @property
    def box(self) -> tuple[float, float, float, float]:
        """``(x1, y1, x2, y2)`` in the frame's pixels."""
        ...

    @property
    def score(self) -> float: ...

    @property
    def label(self) -> str: ...

    @property
    def track_id(self) -> int | None: ...


class FrameDetections(Protocol):
    """One frame's results, as a ``detections`` message reads them (a
    :class:`~edgepipe.vision.detection.Detections`: its class says ``kind = "detections"``)."""

    @property
    def source_id(self) -> str: ...

    @property
    def seq(self) -> int: ...

    @property
    def t_decoded_ns(self) -> int:
        """When the frame left the decoder (``time.monotonic_ns``; 0: unknown)."""
        ...

    @property
    def latency_ms(self) -> float | None: ...

    @property
    def inferred(self) -> bool: ...

    @property
    def width(self) -> int: ...

    @property
    def height(self) -> int: ...

    @property
    def items(self) -> Sequence[Box]: ...


_NS_PER_90K = 1_000_000_000 / 90_000


def pts_90k(t_decoded_ns: int) -> int:
    """A frame's time on a track's 90 kHz timeline: when it left the decoder
    (``time.monotonic_ns``). Frames and their results map to the same value, which is what lets
    results meet their video.

    Not the stream's media time: that restarts when an RTSP camera is reconnected or a file
    loops, and jumps with a camera's clock, and a track's timeline must only go forward. The
    decode time does, and it is the viewer's clock too: a live view shows frames as they come."""
    return round(t_decoded_ns / _NS_PER_90K)


def wall_ms(t_monotonic_ns: int) -> float:
    """Wall-clock Unix milliseconds of a ``time.monotonic_ns`` instant (to 0.1 ms)."""
    return round((time.time_ns() - (time.monotonic_ns() - t_monotonic_ns)) / 1e6, 1)


def message(kind: str, **fields: Any) -> dict[str, Any]:
    """A message of the schema: ``{"v": 1, "kind": kind, **fields}``."""
    return {"v": SCHEMA_VERSION, "kind": kind, **fields}


def detections_message(dets: FrameDetections) -> dict[str, Any]:
    """The ``detections`` message of one frame's results (see the module docstring)."""
    latency = dets.latency_ms
    return message(
        "detections",
        source=redact_text(dets.source_id),
        seq=dets.seq,
        pts_90k=pts_90k(dets.t_decoded_ns),
        t_ms=wall_ms(dets.t_decoded_ns) if dets.t_decoded_ns else None,
        latency_ms=round(latency, 1) if latency is not None else None,
        inferred=dets.inferred,
        w=dets.width,
        h=dets.height,
        boxes=[_box(d) for d in dets.items],
    )


def _box(d: Box) -> list[Any]:
    x1, y1, x2, y2 = d.box
    return [round(x1, 1), round(y1, 1), round(x2, 1), round(y2, 1), round(d.score, 4), d.label, d.track_id]


def message_of(item: Any, node_id: str | None = None) -> dict[str, Any]:
    """The data-channel message of any result item (see the module docstring): detections get
    their own shape; everything else keeps the kind and payload of its ``--results`` line."""
    if _frame_detections(item):
        return detections_message(item)
    node, kind, data, _t = message_parts(item)
    fields: dict[str, Any] = message(kind)
    if node or node_id:
        fields["node"] = node or node_id
    if dataclasses.is_dataclass(data) or hasattr(data, "to_dict"):
        data = to_jsonable(data)
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and key not in fields:
                fields[key] = value
    elif data is not None:
        fields["data"] = data
    try:
        redacted: dict[str, Any] = redact(fields)  # no password of a source URL reaches a viewer
    except RecursionError:  # a payload that contains itself: say so rather than fail the sink
        return message(kind, data="unencodable (the payload contains itself)")
    return redacted


def _frame_detections(item: object) -> TypeGuard[FrameDetections]:
    """A frame's detections: an object whose class says its kind is ``detections``, as the JSON
    lines read a result's kind (:func:`~edgepipe.wire.results.message_parts`)."""
    return not isinstance(item, type) and getattr(type(item), "kind", None) == "detections"


def sync_message(source_id: str, first_pts_90k: int, rtp_offset: int | None = None) -> dict[str, Any]:
    """The ``sync`` message: the pts of the first packet a viewer was sent on a track, and the
    track's RTP clock offset when known."""
    sync = message("sync", source=source_id, first_pts_90k=first_pts_90k)
    if rtp_offset is not None:
        sync["rtp_offset"] = rtp_offset
    return sync


def pack(message: dict[str, Any]) -> bytes:
    """msgpack bytes of one message."""
    packed: bytes = msgpack.packb(message, use_bin_type=True, default=_packable)
    return packed


def _packable(value: Any) -> Any:
    # What msgpack cannot hold as it is (numpy values, dataclasses, enums, paths) is converted
    # as for the JSON lines; anything else becomes its repr, never an exception in a sink.
    converted = to_jsonable(value)
    if converted is value:
        return repr(value)
    return converted


def unpack(data: bytes) -> dict[str, Any]:
    """One message from msgpack bytes. Raises ``ValueError`` for anything but a map with a known
    ``v`` (msgpack's own errors are ``ValueError`` subclasses too)."""
    try:
        unpacked = msgpack.unpackb(data, raw=False)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        raise ValueError(f"not a msgpack message: {exc}") from exc
    if not isinstance(unpacked, dict) or unpacked.get("v") != SCHEMA_VERSION:
        raise ValueError(f"not a version {SCHEMA_VERSION} message")
    return unpacked
