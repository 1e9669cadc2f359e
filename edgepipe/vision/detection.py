"""What a detector says about one frame: :class:`Detections`, a list of :class:`Detection`.

Boxes are ``x1, y1, x2, y2`` in the source frame's pixels (not the model's letterboxed input),
so a sink can draw or crop without knowing the model. Serialized as a plain mapping: JSON lines
through ``--results``, msgpack (:meth:`Detections.to_msgpack`) for the WebRTC data channel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import msgpack

from edgepipe.core.lease import Leased

if TYPE_CHECKING:
    from edgepipe.media.frame import Frame


@dataclass(slots=True)
class Detection:
    """One object in one frame."""

    box: tuple[float, float, float, float]
    """``x1, y1, x2, y2`` in source pixels."""
    score: float
    class_id: int
    label: str
    landmarks: tuple[tuple[float, float], ...] | None = None
    """Keypoints in source pixels (CenterFace: eyes, nose, mouth corners)."""
    track_id: int | None = None
    """Set by the tracker: the same object keeps its id across frames."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "box": [round(v, 1) for v in self.box],
            "score": round(self.score, 4),
            "class_id": self.class_id,
            "label": self.label,
        }
        if self.landmarks is not None:
            out["landmarks"] = [[round(x, 1), round(y, 1)] for x, y in self.landmarks]
        if self.track_id is not None:
            out["track_id"] = self.track_id
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Detection:
        landmarks = data.get("landmarks")
        return cls(
            box=(float(data["box"][0]), float(data["box"][1]), float(data["box"][2]), float(data["box"][3])),
            score=float(data["score"]),
            class_id=int(data["class_id"]),
            label=str(data["label"]),
            landmarks=tuple((float(x), float(y)) for x, y in landmarks) if landmarks is not None else None,
            track_id=data.get("track_id"),
        )

    @property
    def center(self) -> tuple[float, float]:
        x1, y1, x2, y2 = self.box
        return (x1 + x2) / 2, (y1 + y2) / 2


@dataclass(slots=True, eq=False)
class Detections(Leased):
    """The detections of one frame, with the frame's identity.

    With ``Detector(keep_frame=True)`` it also carries the frame itself (``frame``), holding
    its lease: the frame stays valid as long as these detections do, and goes back to its pool
    when the runtime releases them (after the last consumer's call). Overlays that must draw on
    exactly the picture that was analysed (face pixelating) read it from here.
    """

    kind: ClassVar[str] = "detections"
    source_id: str
    seq: int
    pts: int | None
    time_s: float | None
    width: int
    height: int
    model: str
    items: list[Detection] = field(default_factory=list)
    inferred: bool = True
    """False when the model skipped this frame (``every=N``) and the boxes are the tracker's
    prediction from the last detection."""
    latency_ms: float | None = None
    """From the frame leaving the decoder to these results."""
    infer_ms: float | None = None
    """Wall time of the model run on this frame (None where the tracker carried the boxes):
    set against a bare run's time, it shows how long a run waited for a core under load."""
    t_decoded_ns: int = 0
    """When the frame left the decoder (``time.monotonic_ns``): the earliest time edgepipe
    knows; the camera's own capture time is not carried by every stream."""
    frame: Frame | None = field(default=None, repr=False)
    """The analysed frame, when the detector keeps it (never serialized)."""

    def __post_init__(self) -> None:
        Leased.__init__(self)

    def _free(self) -> None:
        frame, self.frame = self.frame, None
        if frame is not None:
            frame.release()

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Any:
        return iter(self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source_id,
            "seq": self.seq,
            "pts": self.pts,
            "time_s": self.time_s,
            "width": self.width,
            "height": self.height,
            "model": self.model,
            "inferred": self.inferred,
            "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 2),
            "infer_ms": None if self.infer_ms is None else round(self.infer_ms, 2),
            "detections": [d.to_dict() for d in self.items],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Detections:
        return cls(
            source_id=data["source"], seq=data["seq"], pts=data["pts"], time_s=data["time_s"],
            width=data["width"], height=data["height"], model=data["model"],
            items=[Detection.from_dict(d) for d in data["detections"]],
            inferred=data["inferred"], latency_ms=data["latency_ms"], infer_ms=data.get("infer_ms"),
        )  # fmt: skip

    def to_msgpack(self) -> bytes:
        packed: bytes = msgpack.packb(self.to_dict(), use_bin_type=True)
        return packed

    @classmethod
    def from_msgpack(cls, data: bytes) -> Detections:
        return cls.from_dict(msgpack.unpackb(data, raw=False))
