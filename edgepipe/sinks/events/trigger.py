"""What starts an event recording: :class:`Trigger`, matched against the recorder's inputs.

Three kinds, each on an input lane of its own (or polled, for a source's state):

- ``detection``: :class:`~edgepipe.vision.Detections` holding a box of one of ``labels`` (any
  label when None) scored at least ``min_score``;
- ``event``: a ``Message("event", ...)``, such as the description a language model writes
  (:class:`~edgepipe.lm.describe.Describe`), when ``events`` is true;
- ``source_state``: a source entering one of ``states`` (``stalled``, ``reconnecting`` …), seen
  in a ``Message("source_state", ...)`` or polled from a source object given to the recorder.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from edgepipe.vision.detection import Detections
from edgepipe.wire.results import Message


@dataclass(frozen=True, slots=True)
class Hit:
    """One trigger that fired: what it was and why."""

    kind: str
    """``detection``, ``event`` or ``source_state``."""
    reason: str
    """For a person: ``person 0.87``; an event: its text (cut to 200 characters); a state:
    ``camera stalled: no frame for 5 s``."""
    source: str = ""
    """The source it speaks of, where it says."""

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "reason": self.reason, "source": self.source}


@dataclass(frozen=True, slots=True)
class Trigger:
    """When a recording starts (or a running one is extended)."""

    labels: Collection[str] | None = None
    """Detection labels that trigger (``{"person", "car"}``); None: any label."""
    min_score: float = 0.5
    """The lowest detection score that triggers."""
    events: bool = True
    """Whether an ``event`` message on an input triggers."""
    states: Collection[str] = ("stalled",)
    """Source states that trigger."""

    def __post_init__(self) -> None:
        if isinstance(self.min_score, bool) or not (
            math.isfinite(self.min_score) and 0 <= self.min_score <= 1
        ):
            raise ValueError(f"Trigger min_score must be in [0, 1], got {self.min_score!r}")
        if isinstance(self.labels, str) or isinstance(self.states, str):
            raise ValueError(
                "Trigger labels and states are collections of names, e.g. {'person'}, not one string"
            )
        if self.labels is not None:
            object.__setattr__(self, "labels", frozenset(self.labels))
        object.__setattr__(self, "states", frozenset(self.states))

    def match(self, item: Any) -> Hit | None:
        """The hit ``item`` makes, if any (a frame or anything else: None)."""
        if isinstance(item, Detections):
            return self._detection(item)
        if isinstance(item, Message):
            kind, data = item.kind, item.data
        elif isinstance(item, dict) and isinstance(item.get("kind"), str):
            kind, data = item["kind"], item
        else:
            return None
        data = data if isinstance(data, dict) else {"text": data}
        if kind == "event" and self.events and data.get("what") != "recording":
            text = data.get("text") or data.get("what") or ""
            return Hit("event", str(text)[:200], str(data.get("source", "")))
        if kind == "source_state":
            return self.state(
                str(data.get("source", "")), str(data.get("state", "")), str(data.get("reason", ""))
            )
        return None

    def state(self, source: str, state: str, reason: str = "") -> Hit | None:
        """The hit of ``source`` entering ``state``, if that state triggers."""
        if state not in self.states:
            return None
        return Hit("source_state", f"{source} {state}" + (f": {reason}" if reason else ""), source)

    def _detection(self, detections: Detections) -> Hit | None:
        best = None
        for det in detections.items:
            if det.score < self.min_score or (self.labels is not None and det.label not in self.labels):
                continue
            if best is None or det.score > best.score:
                best = det
        if best is None:
            return None
        return Hit("detection", f"{best.label} {best.score:.2f}", detections.source_id)
