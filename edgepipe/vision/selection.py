"""Which frames a detector's model sees: one in N per source, the streams staggered, N from the
detector's ``every``, the governor's rung (:class:`~edgepipe.sched.knobs.EveryKnob` turns
:attr:`ModelFrames.every_now`) and what keeping up with live cameras needs
(:mod:`edgepipe.vision.keepup`). The tracker carries the boxes over the others."""

from __future__ import annotations

from typing import Any

from edgepipe.media.frame import Frame
from edgepipe.sched.stagger import phases
from edgepipe.vision.keepup import KeepUp


class ModelFrames:
    """The model-frame choice of one detector, made on its preparing thread, in order."""

    def __init__(self, every: int, keep_up: bool | None) -> None:
        self.every = every
        self.keep_up = keep_up
        self.every_now: float = every
        """The governor's interval: ``every``, or more while it slows detection."""
        self.every_used: float = every
        """The interval in force: the governor's, raised to keep up with live cameras when the
        model alone cannot."""
        self.keeps_up = False
        """Live input (``latest`` lanes) and a tracker allowed: the interval may rise to keep up
        (set when the detector starts)."""
        self.keep = KeepUp()
        self.gauges: dict[str, Any] = {}
        self._counts: dict[str, int] = {}

    @property
    def keep_up_interval(self) -> float:
        """Frames per model run that keeping up with the cameras needs now (1: none)."""
        return self.keep.interval if self.keeps_up else 1.0

    def wants(self, frame: Frame) -> bool:
        """Whether the model sees ``frame`` (else the tracker carries its boxes)."""
        source = frame.source_id
        # Counted per source over the frames this node receives (not by frame number: a
        # ``latest`` inbox drops frames, and counting seq would then always land on the same
        # phase), offset per stream so that streams take turns across every detector.
        # A new source's first frame always goes to the model: its tracker has nothing to carry
        # yet (and an overlay such as a face blur must not start with an empty frame).
        count = self._counts.get(source)
        first = count is None
        count = 0 if count is None else count
        self._counts[source] = count + 1
        every = self._interval(frame)
        phase = phases().phase(self, source, every)  # registers the stream on its first frame
        # A fractional interval (7.5: the model on one frame in 7 or 8, alternately) runs the
        # model on the frames where the count crosses a multiple of it.
        return first or every <= 1 or (count - phase) // every != (count - 1 - phase) // every

    def _interval(self, frame: Frame) -> float:
        """Frames per model run for this frame's stream: the governor's interval, times what
        keeping up with live cameras needs (base ``every`` stays the floor)."""
        every = self.every_now
        if self.keeps_up and (self.keep_up or len(self._counts) > 1):
            keep = self.keep
            now_s = frame.t_decoded_ns / 1e9
            keep.arrived(frame.source_id, now_s, frame.seq)
            # Keeping up needs N frames per model run whatever ``every`` asked for (N counts
            # frames, not intervals); the governor's rungs scale that, so each one still counts.
            every = max(self.every, keep.update(now_s)) * (self.every_now / self.every)
            if every != self.every_used:
                self.gauges["every"] = round(every, 1)
        self.every_used = every
        return every

    def forget(self) -> None:
        """Forget the streams (the detector stopped): a restart starts them afresh."""
        self._counts.clear()
        calls, self.keep = self.keep.calls, KeepUp()
        self.keep.calls = calls
        phases().forget(self)
