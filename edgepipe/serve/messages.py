"""The messages of the WebRTC data channel ``results``: msgpack maps, one per message.

Every message is a msgpack map with ``v`` (the schema version, :data:`SCHEMA_VERSION`) and
``kind``. A client ignores kinds it does not know and refuses a ``v`` it does not know.

``detections`` (one per analysed frame, empty ones too, so a client can clear its boxes)::

    {"v": 1, "kind": "detections", "source": "cam", "seq": 42, "pts_90k": 123456,
     "w": 640, "h": 360, "boxes": [[x1, y1, x2, y2, score, label], ...]}

    boxes are in the source frame's pixels (w x h); label is a string.

``sync`` (once per viewer per track, before that track's first ``detections``)::

    {"v": 1, "kind": "sync", "source": "cam", "first_pts_90k": 120000}

Alignment with the video: aiortc starts each sender's RTP clock at a random offset, so a
client cannot read pts off RTP timestamps directly. ``pts_90k`` is the frame's time on the
track's 90 kHz timeline (:func:`pts_90k`, the pts of the H.264 packet sent for that frame) and
``first_pts_90k`` is the pts of the first packet sent to this viewer on that track. With the RTP
timestamp ``rtp0`` of the first frame the client received: ``pts = first_pts_90k + (rtp -
rtp0) mod 2**32``, and a message belongs to the frame whose pts equals its ``pts_90k``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    from edgepipe.vision.detection import Detections

SCHEMA_VERSION = 1
"""The ``v`` of every message; raised when a field changes meaning or goes away."""

_NS_PER_90K = 1_000_000_000 / 90_000


def pts_90k(time_s: float | None, t_decoded_ns: int) -> int:
    """A frame's time on a track's 90 kHz timeline: its media time where the stream has one,
    else when it left the decoder (``time.monotonic_ns``). Frames and their results map to the
    same value, which is what lets results meet their video."""
    if time_s is not None:
        return round(time_s * 90_000)
    return round(t_decoded_ns / _NS_PER_90K)


def detections_message(dets: Detections) -> dict[str, Any]:
    """The ``detections`` message of one frame's results (see the module docstring)."""
    return {
        "v": SCHEMA_VERSION,
        "kind": "detections",
        "source": dets.source_id,
        "seq": dets.seq,
        "pts_90k": pts_90k(dets.time_s, dets.t_decoded_ns),
        "w": dets.width,
        "h": dets.height,
        "boxes": [[round(x, 1) for x in d.box] + [round(d.score, 4), d.label] for d in dets.items],
    }


def sync_message(source_id: str, first_pts_90k: int) -> dict[str, Any]:
    """The ``sync`` message: the pts of the first packet a viewer was sent on a track."""
    return {"v": SCHEMA_VERSION, "kind": "sync", "source": source_id, "first_pts_90k": first_pts_90k}


def pack(message: dict[str, Any]) -> bytes:
    """msgpack bytes of one message."""
    packed: bytes = msgpack.packb(message, use_bin_type=True)
    return packed


def unpack(data: bytes) -> dict[str, Any]:
    """One message from msgpack bytes. Raises ``ValueError`` for anything but a map with a known
    ``v`` (msgpack's own errors are ``ValueError`` subclasses too)."""
    try:
        message = msgpack.unpackb(data, raw=False)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        raise ValueError(f"not a msgpack message: {exc}") from exc
    if not isinstance(message, dict) or message.get("v") != SCHEMA_VERSION:
        raise ValueError(f"not a version {SCHEMA_VERSION} message")
    return message
