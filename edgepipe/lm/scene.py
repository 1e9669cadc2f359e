"""What a window of results says about the scene and its sources, as prompt fields.

:class:`SceneWindow` keeps the results of the last ``window_s`` seconds (detections count by
label, any other item by its kind) and renders them as the fields a ``Describe`` template may
use:

- ``seconds``: the window's length; ``frames``: frames seen in it;
- ``summary``: "face in 12 of 40 frames (up to 2 at once)", or "nothing detected in 40 frames";
- ``counts``: frames in which each label was seen, a dict;
- ``sources``: the sources seen, comma-separated;
- ``state``: each source's state, e.g. "camera: live, 9.8 frames/s analysed" or "camera:
  stalled (read timed out), no frames for 12 s, 2 reconnects".

A source's state comes from its status when the window has one (:attr:`SceneWindow.sources`,
by source id: ``Describe`` gives it the states of the sources upstream, ``current_node().sources``;
anything with ``state_info`` and ``reconnects``, as :class:`~edgepipe.media.status.SourceStatus`
has), and otherwise from what arrives: a source whose frames stopped coming ``stale_s`` seconds
ago is "silent".
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

FIELDS = ("seconds", "summary", "frames", "counts", "sources", "state")
_MAX_SOURCES = 256  # what a misbehaving producer with ever-new source ids can make us remember


@dataclass(frozen=True)
class SourceState:
    """One source as the window sees it."""

    source: str
    state: str
    """The source's own state (live, stalled, reconnecting, ...), or live/silent as observed."""
    frames: int
    """Frames from it in the window."""
    fps: float | None
    """Frames per second analysed over the window: frame intervals over the time they span
    (None before two frames: one frame is no rate)."""
    last_frame_s: float | None
    """Seconds since its last frame; None before the first."""
    reconnects: int = 0
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, stale_s: float) -> str:
        parts = [f"{self.source}: {self.state}" + (f" ({self.reason})" if self.reason else "")]
        if self.fps is not None:
            parts.append(f"{self.fps:.1f} frames/s analysed")
        elif self.frames:
            parts.append(f"{self.frames} frame{'' if self.frames == 1 else 's'} analysed")
        if self.last_frame_s is None:
            parts.append("no frames yet")
        elif self.last_frame_s > stale_s:
            parts.append(f"no frames for {self.last_frame_s:.0f} s")
        if self.reconnects:
            parts.append(f"{self.reconnects} reconnect{'' if self.reconnects == 1 else 's'}")
        return ", ".join(parts)


class SceneWindow:
    """Results of the last ``window_s`` seconds, and the sources they came from."""

    def __init__(self, window_s: float, *, stale_s: float = 3.0, forget_s: float = 300.0) -> None:
        """``forget_s``: a source seen (not given) and silent this long is left out of the state,
        so that the prompt does not grow with every source that ever came and went."""
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        if forget_s < window_s:
            raise ValueError(f"forget_s ({forget_s}) must be at least window_s ({window_s})")
        self.window_s = window_s
        self.stale_s = stale_s
        self.forget_s = forget_s
        self.sources: Mapping[str, Any] = {}
        """Source id -> its status (``state_info``, ``reconnects``): listed first, in its own state."""
        self._seen: deque[tuple[float, str, Counter[str], bool]] = deque(maxlen=10_000)
        self._first: dict[str, float] = {}
        self._last: dict[str, float] = {}

    def observe(self, item: Any, now: float | None = None) -> None:
        """Add one result: a frame's detections count by label, any other item by its kind."""
        t = time.monotonic() if now is None else now
        seen = self._seen
        while seen and t - seen[0][0] > self.window_s:  # out of every window to come: memory flat
            seen.popleft()
        items = getattr(item, "items", None)
        source = str(getattr(item, "source_id", "") or "")
        if isinstance(items, list):
            labels = Counter(str(getattr(det, "label", "object")) for det in items)
            self._seen.append((t, source, labels, True))
            if source:
                if source not in self._first and len(self._first) >= _MAX_SOURCES:
                    oldest = min(self._last, key=self._last.__getitem__)
                    del self._first[oldest], self._last[oldest]
                self._first.setdefault(source, t)
                self._last[source] = t
        else:
            kind = str(getattr(item, "kind", type(item).__name__))
            self._seen.append((t, source, Counter({kind: 1}), False))

    def source_states(self, now: float | None = None) -> list[SourceState]:
        """Every source given, then every source seen (in the order first seen)."""
        t = time.monotonic() if now is None else now
        frames: Counter[str] = Counter()
        spans: dict[str, tuple[float, float]] = {}  # first and last frame in the window
        for at, sid, _, is_frame in self._seen:
            if is_frame and t - at <= self.window_s:
                frames[sid] += 1
                first, _last = spans.get(sid, (at, at))
                spans[sid] = (min(first, at), at)
        objects = dict(self.sources)
        for sid in [s for s, last in self._last.items() if t - last > self.forget_s and s not in objects]:
            del self._first[sid], self._last[sid]
        ids = list(objects) + [s for s in self._first if s not in objects]  # first seen first
        states = []
        for sid in ids:
            last = self._last.get(sid)
            age = None if last is None else max(0.0, t - last)
            n = frames[sid]
            first, last_in = spans.get(sid, (0.0, 0.0))
            # A rate needs a frame interval: one frame, or frames at one instant, are none.
            fps = round((n - 1) / (last_in - first), 2) if n >= 2 and last_in > first else None
            obj = objects.get(sid)
            if obj is not None:
                info = obj.state_info  # state and reason, read together
                state = str(info[0])
                reason = "" if state == "live" else str(info[1] or "")
                reconnects = int(getattr(obj, "reconnects", 0) or 0)
            else:
                state = "live" if age is not None and age <= self.stale_s else "silent"
                reason, reconnects = "", 0
            states.append(SourceState(sid, state, n, fps, age, reconnects, reason))
        return states

    def fields(self, now: float | None = None, source: str | None = None) -> dict[str, Any]:
        """The template fields (see the module docstring) over the window ending ``now``: of
        every source, or of ``source`` alone (its results and its state)."""
        t = time.monotonic() if now is None else now
        recent = [e for e in self._seen if t - e[0] <= self.window_s and (source is None or e[1] == source)]
        frames = sum(1 for entry in recent if entry[3])
        in_frames: Counter[str] = Counter()
        most: dict[str, int] = {}
        for _, _, labels, _ in recent:
            for label, n in labels.items():
                in_frames[label] += 1
                most[label] = max(most.get(label, 0), n)
        if in_frames:
            summary = ", ".join(
                f"{label} in {seen} of {frames} frames (up to {most[label]} at once)"
                if frames
                else f"{seen} {label}"
                for label, seen in in_frames.most_common()
            )
        elif frames:
            summary = f"nothing detected in {frames} frame{'' if frames == 1 else 's'}"
        else:
            summary = "no input"
        states = [s for s in self.source_states(t) if source is None or s.source == source]
        return {
            "seconds": self.window_s,
            "summary": summary,
            "frames": frames,
            "counts": dict(in_frames),
            "sources": ", ".join(sorted({entry[1] for entry in recent if entry[1]})),
            "state": "; ".join(s.text(self.stale_s) for s in states) or "no sources",
        }
