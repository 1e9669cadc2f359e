"""Watching a hardware decoder on the real stream, and what its replacement starts from.

A hardware decoder that decodes the trial clip can still fail on the stream itself (10-bit
HEVC, 4:4:4, a profile the chip lacks): every packet then raises, or gives no picture. A
:class:`DecoderWatch` counts, per packet, the decoder's failures in a row from the stream's first
keyframe on (packets before it cannot give a picture with any decoder): :data:`FAIL_AFTER`
packets in a row without a frame, at the start (the decoder is confirmed on the stream's own
first frames) or mid-stream, and it has failed. The source then swaps the decoder in place
(:meth:`~edgepipe.media.chooser.DecoderChooser.failover`): the input stays open and the source
stays ``live``.

The watch keeps the packets since the last keyframe before the failure began (up to
:data:`KEEP_MAX`): the new decoder is fed them first, so that it starts at a keyframe and no
picture is lost, and what it decodes again of frames already delivered is left out (by
timestamp, else by count).
"""

from __future__ import annotations

from typing import Any

from edgepipe.media.decode import describe_ffmpeg_error

FAIL_AFTER = 30
"""Packets in a row without a frame (raised or empty) that make a hardware decoder failed: about
one second of video, more than any decoder's delay (frame threads hold up to 16)."""

KEEP_MAX = 600
"""Packets kept for the replacement decoder at most (a GOP of 20 s at 30 fps); past it, the
replacement waits for the next keyframe instead."""


class DecoderWatch:
    """One decoder's record on one stream; used from the decode thread, per packet."""

    __slots__ = ("_delivered", "_errors", "_keep", "_keyed", "_last_pts", "_overflow", "_streak",
                 "fail_after", "last_error", "watching")  # fmt: skip

    def __init__(self, fail_after: int = FAIL_AFTER, *, watching: bool = True) -> None:
        self.fail_after = fail_after
        self.watching = watching
        """False for a decoder with nothing to fall back to (software)."""
        self.last_error = ""
        self._keep: list[Any] = []
        self._overflow = False
        self._keyed = False
        self._streak = 0
        self._errors = 0
        self._delivered = 0
        self._last_pts: int | None = None

    def packet(self, packet: Any) -> None:
        """Note a packet about to be decoded (kept for a replacement decoder)."""
        if not self.watching:
            return
        if packet.is_keyframe:
            self._keyed = True
            if not self._streak:  # while failing, keep from the keyframe before the failure
                self._keep.clear()
                self._overflow = False
                self._delivered = 0
        if not self._keyed or self._overflow:
            return
        if len(self._keep) < KEEP_MAX:
            self._keep.append(packet)
        else:
            self._keep.clear()
            self._overflow = True

    def outcome(self, frames: int, error: BaseException | None) -> bool:
        """Record what the packet gave (``frames``, or the ``error`` it raised); True when the
        decoder has now failed."""
        if not self.watching:
            return False
        if frames:
            self._streak = 0
            self._errors = 0
            return False
        if not self._keyed:
            return False  # before the first keyframe no decoder gives a picture
        self._streak += 1
        if error is not None:
            self._errors += 1
            self.last_error = describe_ffmpeg_error(error)
        return self._streak >= self.fail_after

    @property
    def errors(self) -> int:
        """Packets of the failed streak that raised (counted as corrupt, wrongly)."""
        return self._errors

    @property
    def reason(self) -> str:
        """Why the decoder counts as failed, in words."""
        what = f"{self._streak} packets in a row without a frame"
        return f"{what} ({self.last_error})" if self.last_error else what

    def delivered(self, av_frame: Any) -> None:
        """A frame of this stream went out (what a replacement must not deliver again)."""
        self._delivered += 1
        if av_frame.pts is not None:
            self._last_pts = av_frame.pts

    def restart(self, watching: bool) -> list[Any]:
        """A new decoder takes over: the packets to feed it first (from the last keyframe; none
        if too many were kept), and the watch starts over for it."""
        if self._overflow:
            self._keep.clear()
        kept = list(self._keep)  # still kept: a third decoder would start there too
        self.watching = watching
        self._keyed = bool(kept)
        self._streak = self._errors = 0
        self._overflow = False
        self.last_error = ""
        return kept

    def fresh(self, frames: list[Any]) -> list[Any]:
        """Of the frames a replacement decoded from the kept packets, those not delivered yet:
        later than the last delivered timestamp, else all but as many as went out since the
        keyframe."""
        last = self._last_pts
        if last is not None and all(f.pts is not None for f in frames):
            return [f for f in frames if f.pts > last]
        return frames[self._delivered :]
