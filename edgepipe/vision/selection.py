"""Which frames a detector's model sees: one in N per source, the streams staggered, N from the
detector's ``every``, the governor's rung (:class:`~edgepipe.sched.knobs.EveryKnob` turns
:attr:`ModelFrames.every_now`) and what keeping up with live cameras needs
(:mod:`edgepipe.vision.keepup`). The tracker carries the boxes over the others."""

from __future__ import annotations

import functools
from typing import Any

from edgepipe.core.context import CallLimit
from edgepipe.media.frame import Frame
from edgepipe.sched.gate import Ticket, gate
from edgepipe.sched.stagger import Phases, phases
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
        self.calls = CallLimit()
        """The detector's calls in flight (its node's): ``free`` says whether a model run can be
        had now."""
        self.deferred = 0
        """Model frames carried because no call was free (their camera's next had the model)."""
        self._owed: set[str] = set()
        """Sources whose model frame was deferred (no call free): their next frame has it."""
        self.gauges: dict[str, Any] = {}
        self._last: dict[str, int] = {}
        """Per source, the number of the last frame it was asked about."""
        self._counts: dict[str, int] = {}
        """Per source, the frames it was asked about (0 for the first)."""
        self._phases: Phases | None = None
        """Where its streams take turns: the run's it first saw a frame in, until it forgets them."""

    def opened(self, calls: CallLimit, ticket: Ticket, warmup_s: float) -> None:
        """The detector's model is loaded: its calls in flight, its ticket at the gate (what
        the budget gives its calls), its warm-up run's time (a start for keeping up)."""
        self.calls = self.keep.calls = calls
        self.keep.units, self.keep.ticket = gate().units or 0, ticket
        calls.ready = functools.partial(gate().would_admit, ticket, beside=True)
        self.keep.took(warmup_s)

    def _call_free(self) -> bool:
        """A call of the model's could start at once: none is under way, or one more is free
        and the gate would admit it beside them (not the spare units beyond its pace)."""
        calls = self.calls
        return calls.free > 0 and (calls.free >= calls.allowed or calls.another())

    @property
    def keeping_up(self) -> bool:
        """The interval rises to keep up with live cameras now (several, or one when asked)."""
        return self.keeps_up and (bool(self.keep_up) or len(self._last) > 1)

    @property
    def keep_up_interval(self) -> float:
        """Frames per model run that keeping up with the cameras needs now (1: none)."""
        return self.keep.interval if self.keeps_up else 1.0

    def wants(self, frame: Frame) -> bool:
        """Whether the model sees ``frame`` (else the tracker carries its boxes)."""
        source = frame.source_id
        # Keeping up with live cameras (no frame dropped before this node), by frame number,
        # offset per stream, so that the streams take turns across every detector in time:
        # cameras started together number their frames alike. Otherwise by the frames this node
        # receives (a ``latest`` lane that drops every other frame must still leave one in
        # ``every`` of those it passes on to the tracker), offset per stream too. The model runs
        # where the count crosses into the next interval, so a fractional one (7.5) runs it on
        # one frame in 7 or 8, alternately. A new source's first frame (or its first after its
        # numbers restart) always goes to the model: its tracker has nothing to carry yet, and
        # an overlay such as a face pixelation must not start with an empty frame.
        seq = frame.seq
        last = self._last.get(source)
        self._last[source] = seq
        count = self._counts.get(source, -1) + 1
        self._counts[source] = count
        every = self._interval(frame)
        if self._phases is None:
            self._phases = phases()
        phase = self._phases.phase(self, source, every)  # registers the stream on its first frame
        now, before = (seq, last) if self.keeping_up and last is not None else (count, count - 1)
        want = (
            source in self._owed or last is None or seq <= last or every <= 1
            or (now - phase) // every != (before - phase) // every
        )  # fmt: skip
        if want and self.keeping_up and not self._call_free():
            # Keeping up, no call of the model's could start now: this frame is carried, and
            # its camera's next one goes to the model instead (no frame waits for a call).
            self._owed.add(source)
            self.deferred += 1
            self.gauges["deferred"] = self.deferred
            return False
        self._owed.discard(source)
        return want

    def _interval(self, frame: Frame) -> float:
        """Frames per model run for this frame's stream: the governor's interval, times what
        keeping up with live cameras needs (base ``every`` stays the floor)."""
        every = self.every_now
        if self.keeping_up:
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
        self._last.clear()
        self._counts.clear()
        self._owed.clear()
        self.keep = KeepUp()
        self.keep.calls = self.calls
        if self._phases is not None:
            self._phases.forget(self)
            self._phases = None
