"""One event clip as the recorder follows it, and the ``event`` messages it gives.

A :class:`ClipRecord` is the clip's span of frames (whether or not its file could be kept), its
file while written, and its messages: ``start`` when it opens, then exactly one of ``end`` (its
file saved) or ``removed`` (``error`` says why, when a file was lost). Changed by the
recorder's worker only, but read by the stop (:meth:`~edgepipe.sinks.events.engine.RecorderEngine.cut_short`).
"""

from __future__ import annotations

from pathlib import Path

from edgepipe.sinks.events.clip import ClipWriter
from edgepipe.sinks.events.encode import TICKS_PER_S, TIME_BASE
from edgepipe.sinks.events.trigger import Hit
from edgepipe.wire.results import Message


class ClipRecord:
    """The clip being written (or, once its file failed, the span it covers) and what its event
    says (see the module's documentation)."""

    __slots__ = (
        "base_pts",
        "bytes",
        "closing",
        "end_t",
        "error",
        "first",
        "first_trigger_pts",
        "frames",
        "last_pts",
        "last_trigger_pts",
        "part",
        "path",
        "source",
        "start",
        "start_t",
        "triggers",
        "writer",
    )

    def __init__(self, folder: Path, first: Hit, source: str, start_t: float, trigger_pts: int,
                 base_pts: int) -> None:  # fmt: skip
        self.writer: ClipWriter | None = None
        """Its file; ``None`` once it failed (``error`` says why)."""
        self.path = folder
        """Its file's name once it has one (the folder before)."""
        self.part: Path | None = None
        """Its hidden file while it is written."""
        self.start: Message | None = None
        self.closing: Message | None = None
        """Its ``end`` or ``removed`` once made (by the worker, or by the stop): made once."""
        self.error: str | None = None
        self.first = first
        self.source = source
        self.start_t = self.end_t = start_t
        self.base_pts = self.last_pts = base_pts
        self.first_trigger_pts = self.last_trigger_pts = trigger_pts
        self.triggers = 1
        self.frames = 0
        """Frames (packets) the clip took, written or, once its file failed, not."""
        self.bytes = 0

    def message(self, state: str, why: str | None) -> Message:
        """Its ``event`` message: ``start``, ``end`` or ``removed`` (``why``: what ended it)."""
        ended = state != "start"
        data = {
            "what": "recording",
            "state": state,
            "path": str(self.path),
            "source": self.source,
            "start_t": self.start_t,
            "start_pts": self.base_pts,
            "end_t": self.end_t if ended else None,
            "end_pts": self.last_pts if ended else None,
            "trigger_pts": self.first_trigger_pts,
            "last_trigger_pts": self.last_trigger_pts,
            "time_base": str(TIME_BASE),
            "duration_s": round((self.last_pts - self.base_pts) / TICKS_PER_S, 3) if ended else None,
            "frames": self.frames,
            "bytes": self.bytes,
            "trigger": self.first.to_dict(),
            "triggers": self.triggers,
            "ended_by": why,
            "error": self.error,
        }
        return Message("event", data)
