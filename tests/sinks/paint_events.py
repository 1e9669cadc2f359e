"""A small pipeline for the event recorder's tests (run in process, and by ``edgepipe run``):
camera -> paint (the top half black: the output frames) -> events, and a cue that triggers an
``event`` at frame ``trigger_at`` (and every ``every`` frames after it, when above 0)."""

from __future__ import annotations

import logging
from typing import Any

from edgepipe import Pipeline
from edgepipe.media import VideoSource
from edgepipe.media.draw import writable_copy
from edgepipe.media.frame import Frame
from edgepipe.sinks.events.recorder import EventRecorder
from edgepipe.wire.results import Message

log = logging.getLogger("paint_events")


def paint(frame: Frame) -> Frame:
    """The output frame: a copy whose top half is black."""
    out = writable_copy(frame)
    out.y[: out.height // 2] = 16
    return out


class Cue:
    def __init__(self, trigger_at: int, every: int) -> None:
        self.trigger_at = trigger_at
        self.every = every

    def process(self, frame: Frame) -> Message | None:
        n = frame.seq - self.trigger_at
        if n == 0 or (n > 0 and self.every and n % self.every == 0):
            return Message("event", {"what": "cue", "text": f"frame {frame.seq}", "source": frame.source_id})
        return None


class Events:
    """Keeps the recorder's messages (and logs each)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def process(self, message: Message) -> None:
        self.messages.append(message.data)
        log.info("event %s %s", message.data["state"], message.data["path"])


def pipeline(
    events_dir: str,
    source: str = "synthetic://320x240@15",
    trigger_at: int = 45,
    every: int = 0,
    pre_s: float = 1.0,
    post_s: float = 1.0,
    max_clip_s: float = 120.0,
) -> Pipeline:
    p = Pipeline("paint_events")
    camera = p.source("camera", VideoSource(source))
    painted = p.stage("paint", paint, inputs=camera)
    cues = p.stage("cue", Cue(trigger_at, every), inputs=camera)
    recorder = EventRecorder(events_dir, pre_s=pre_s, post_s=post_s, max_clip_s=max_clip_s)
    events = p.stage("events", recorder, inputs={"frames": painted, "cues": cues})
    p.sink("log", Events(), inputs=events)
    return p
