"""Keeping up with live cameras: the model interval at which a detector sees every frame.

A detector fed by four 30 fps cameras gets 120 frames a second; a model run of 50 ms allows
20. Running the model on every frame it manages (and letting the ``latest`` lanes drop the
rest) gives each camera about five results a second, in bursts, and frames without boxes in
between. Run instead on one frame in ``N`` per camera, with the tracker carrying the boxes over
the others, and every frame gets its boxes at a steady rate, for nearly the same number of
model runs: that ``N`` is what :class:`KeepUp` works out, from what it measures.

With ``F`` frames arriving a second (all streams), ``m`` seconds a model frame's call takes
(its run, its wait for the CPU budget, its outputs decoded) and ``k`` calls in flight at once
(``instances``, less any the governor shed), the model's calls keep ``F/N·m/k`` of each
second's ``k`` threads busy; they keep up when that is at most :data:`BUSY` (room for the
jitter of the runs and of arrivals)::

    N >= F·m / (k·BUSY)

That is Little's law: with its ``k`` calls always under way, a node finishes ``k/m`` of them a
second, and ``m`` counts the waits of a call that the governor holds back (a second call paced
in the spare units), so the figure follows the budget. Below saturation the waits are shorter
and the law promises more than the budget gives: the runs a second are also held to the calls'
worth of the budget (:meth:`KeepUp.calls_worth`: the main units, and the paced share of the
spare ones) over a run's own time. Tracked frames take no thread of the
model's (they are carried in order beside its runs, :mod:`edgepipe.runtime.inflight.steps`): they do
not count.

The interval never falls below what the pipeline asked for (``every``), moves only by more
than :data:`DEADBAND` (runs vary by a few percent; chasing that would move the model from frame
to frame for nothing), and only while every figure is measured; it rises at once (cameras that
come one after another at the start, each adding its frames: held at the first one's interval
for :data:`SETTLE_S`, eight cameras queued seven seconds of model runs), and falls at most once
a :data:`SETTLE_S`.
Thread-safe enough for its use: written from the detector's preparing thread (arrivals) and its
finishing step (the calls' times), each field by one of them; a torn read costs one frame's
decision.
"""

from __future__ import annotations

import math

from edgepipe.core.context import CallLimit
from edgepipe.sched.gate import Ticket

BUSY = 0.95
"""The share of its time the detector may be busy: the rest absorbs the jitter of runs and
arrivals (its lanes hold a burst of frames). In ``scripts/bench/headroom/bench.py`` (4 cameras, quiet
machine): 0.85 and 0.9 gave a median of 18.9 model runs/s, 0.95 gave 20.0-20.6/s, with the same
steadiness of each camera's results (``rate_cv`` 0.05-0.075 in all three)."""
SETTLE_S = 0.5
DEADBAND = 0.06
MAX_INTERVAL = 64.0
STALE_S = 1.0
"""A source silent this long (a camera gone) no longer counts in the arrival rate."""
_WEIGHT = 0.1
"""Of each new sample in the running means (about the last ten)."""


class KeepUp:
    """See the module docstring. Times are in seconds, from the caller's monotonic clock."""

    __slots__ = ("_changed_at", "_gaps", "_last_seen", "_last_seq", "_model_s", "_run_s", "calls", "interval",
                 "ticket", "units")  # fmt: skip

    def __init__(self) -> None:
        self._last_seen: dict[str, float] = {}
        self._last_seq: dict[str, int] = {}
        self._gaps: dict[str, float] = {}
        """Per source: the running mean of the time between its frames' decoding."""
        self._model_s = 0.0
        self._run_s = 0.0
        self.calls = CallLimit()
        """The detector's calls in flight (``allowed`` of them now: the governor may shed one)."""
        self.units = 0
        """The CPU budget's main units (the gate's; 0: ungoverned, every call runs at once)."""
        self.ticket: Ticket | None = None
        """The model's ticket at the gate: how much of the spare units its calls get."""
        self.interval = 1.0
        """Frames per model run, per source, needed to keep up (1: the model keeps up alone)."""
        self._changed_at = -math.inf

    def arrived(self, source: str, t_s: float, seq: int | None = None) -> None:
        """Frame ``seq`` of ``source`` left its decoder at ``t_s``. The camera's rate is
        measured over the frame numbers, so frames dropped before reaching the detector (its
        ``latest`` lanes' drops) still count: they are what it failed to keep up with."""
        last = self._last_seen.get(source)
        last_seq = self._last_seq.get(source)
        self._last_seen[source] = t_s
        if seq is not None:
            self._last_seq[source] = seq
        if last is None or t_s <= last:
            return
        frames = seq - last_seq if seq is not None and last_seq is not None and seq > last_seq else 1
        gap = (t_s - last) / frames
        if gap > STALE_S:  # the camera was away (a reconnect): not its frame rate
            return
        mean = self._gaps.get(source)
        self._gaps[source] = gap if mean is None else mean + (gap - mean) * _WEIGHT

    def forget(self, source: str) -> None:
        self._last_seen.pop(source, None)
        self._last_seq.pop(source, None)
        self._gaps.pop(source, None)

    def took(self, seconds: float, run_s: float = 0.0) -> None:
        """A model frame's call took ``seconds`` (its run, its wait for the budget, its decoding),
        of which its run ``run_s``; the first figure may be the model's warm-up run, so that the
        cameras' first seconds do not all go to the model while the figures come in."""
        self._model_s = _mean(self._model_s, seconds)
        if run_s > 0:
            self._run_s = _mean(self._run_s, run_s)

    def calls_worth(self) -> float:
        """How many calls' worth of the budget the detector's calls get now: those in the main
        units, and the governor's share of the spare units for the one lent them."""
        allowed = max(1, self.calls.allowed)
        if not self.units or self.ticket is None:
            return float(allowed)
        return min(allowed, self.units) + max(0, allowed - self.units) * self.ticket.spare_duty

    def rate(self, now_s: float | None = None) -> float:
        """Frames arriving per second, all sources; at ``now_s``, only those still sending
        (a frame within :data:`STALE_S`, or four of its own gaps)."""
        return sum(
            1.0 / gap
            for source, gap in self._gaps.items()
            if gap > 0 and (now_s is None or now_s - self._last_seen[source] <= max(STALE_S, 4 * gap))
        )

    def needed(self, now_s: float | None = None) -> float:
        """The interval the measured figures call for now (1 when they are not all in yet)."""
        rate, m = self.rate(now_s), self._model_s
        if not rate or not m:
            return 1.0
        runs_per_s = max(1, self.calls.allowed) / m  # Little's law, its calls all under way
        if self._run_s:  # no more than the budget gives them, a paced call waiting at the gate
            runs_per_s = min(runs_per_s, self.calls_worth() / self._run_s)
        return min(MAX_INTERVAL, max(1.0, rate / (runs_per_s * BUSY)))

    def update(self, now_s: float) -> float:
        """The interval to use from now: raised at once when the figures call for more (fewer
        model runs can always be had), lowered at most every :data:`SETTLE_S`."""
        need = self.needed(now_s)
        rise = need > self.interval * (1 + DEADBAND)
        if not rise and now_s - self._changed_at < SETTLE_S:
            return self.interval
        if rise or need < self.interval * (1 - DEADBAND):
            self.interval = need
            self._changed_at = now_s
        return self.interval


def _mean(mean: float, sample: float) -> float:
    return sample if not mean else mean + (sample - mean) * _WEIGHT
