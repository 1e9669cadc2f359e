"""A recording's clock: each frame's timestamp, and when the next keyframe is due.

Timestamps are milliseconds, strictly increasing (a muxer refuses a repeated one), measured from
an anchor (a timestamp and the media or decode time it stood for), never step by step, so that
rounding to milliseconds does not add up over hours of video. They follow the frames' own media
time (pts) while it moves forward, else their decode time: a file processed faster than real
time keeps its timing, a live camera whose clock resets keeps going, and dropped frames leave
their gap.

Keyframes: one is due when the next frame, at the pace the frames come, would fall more than
``interval_ms`` after the last keyframe. With a fragment per keyframe interval
(:mod:`edgepipe.media.recording.file`), that bounds what a kill loses, whatever the frame rate.
"""

from __future__ import annotations

from typing import Protocol


class Timed(Protocol):
    """What the clock reads of a frame."""

    @property
    def time_s(self) -> float | None: ...

    @property
    def t_decoded_ns(self) -> int: ...


class RecordingClock:
    """Timestamps (ms) and the keyframe schedule of one recording. One writer thread."""

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        """The longest time from one keyframe to the next."""
        self._last_pts: int | None = None
        self._last_media_ms: float | None = None
        self._media_anchor: tuple[int, float] | None = None
        self._decoded_anchor: tuple[int, int] = (0, 0)
        self._last_key_ms: int | None = None
        self._frame_ms = 0.0
        """The recent time between two frames (a moving average)."""

    def next_pts(self, frame: Timed) -> int:
        """``frame``'s timestamp, in ms: 0 for the first frame."""
        media_s = frame.time_s
        media_ms = None if media_s is None else media_s * 1000.0
        decoded_ns = frame.t_decoded_ns
        last = self._last_pts
        if last is None:
            pts = 0
            self._decoded_anchor = (0, decoded_ns)
            self._media_anchor = None if media_ms is None else (0, media_ms)
        elif (
            media_ms is not None
            and self._media_anchor is not None
            and self._last_media_ms is not None
            and media_ms > self._last_media_ms
        ):
            pts = max(last + 1, self._media_anchor[0] + round(media_ms - self._media_anchor[1]))
            self._decoded_anchor = (pts, decoded_ns)
        else:
            # No media time, or it went back (a camera's clock reset): decode time carries on,
            # and media time counts again from here.
            anchor_pts, anchor_ns = self._decoded_anchor
            pts = max(last + 1, anchor_pts + round((decoded_ns - anchor_ns) / 1e6))
            self._media_anchor = None if media_ms is None else (pts, media_ms)
        if last is not None:
            step = pts - last
            self._frame_ms = step if not self._frame_ms else 0.8 * self._frame_ms + 0.2 * step
        self._last_pts, self._last_media_ms = pts, media_ms
        return pts

    def keyframe_due(self, pts: int) -> bool:
        """Whether the frame at ``pts`` must be a keyframe (the first one is); if so, it counts
        as the last keyframe from now on."""
        last = self._last_key_ms
        # The next frame would land past the interval: this one starts the next.
        if last is None or pts + min(self._frame_ms, self.interval_ms) > last + self.interval_ms:
            self._last_key_ms = pts
            return True
        return False

    def keyframe_made(self, pts: int) -> None:
        """The encoder made a keyframe at ``pts`` of its own accord (a scene cut): the interval
        counts from there."""
        if self._last_key_ms is None or pts > self._last_key_ms:
            self._last_key_ms = pts
