"""Which limit holds a model node's rate: what ``--stats`` names on its line (``limit=``).

Over each window (a second) a model node (``loads_model``: a detector, a language model) that
handles the frames it is given keeps up, and its input's rate is its own: ``input``. One that
does not (frames replaced in its ``latest`` lane or shed by the governor) is held by one of:

- ``budget``: the CPU budget. The governor has climbed (it is shedding work to keep the
  headroom), or the process's CPU is at its target: more runs would take the headroom.
- ``gate``: other heavy calls. Its runs waited for the gate's units (held by another model, a
  token step, an encode) a tenth of the window or more.
- ``model``: the model itself. Neither of the above: it runs back to back with every thread it
  was given (:attr:`~edgepipe.sched.budget.CpuBudget.detector_threads`), and only a faster
  model, a smaller input or ``every`` would do more.

Pure logic on the figures the scheduler gathers (:class:`Window`); tests give it their own.
"""

from __future__ import annotations

from dataclasses import dataclass

BEHIND_SHARE = 0.02
"""Frames lost (replaced or shed) past this share of those offered: the node is behind. One
frame lost to a slow run now and then is jitter, not a limit."""
GATE_SHARE = 0.1
"""Waiting at the gate this share of the window or more: the gate binds."""
SLACK = 0.02
"""The CPU within this of its target counts as at it (as the governor's own slack)."""


@dataclass(frozen=True, slots=True)
class Window:
    """One model node's figures over the last window (counts and seconds within it)."""

    seconds: float
    offered: int
    """Items put into its inbox."""
    lost: int
    """Items its lanes dropped (replaced by newer ones) or the governor shed."""
    waited_s: float
    """Time its model's runs waited at the gate (for units or their pace)."""


def binding(window: Window, *, cpu: float | None, target: float, level: int) -> str:
    """The limit that holds the node over ``window`` (see the module docstring), given the
    process's CPU share (None: not measured yet), its target and the governor's level."""
    if window.offered <= 0 or window.lost <= BEHIND_SHARE * window.offered:
        return "input"
    if level > 0 or (cpu is not None and cpu >= target - SLACK):
        return "budget"
    if window.waited_s >= GATE_SHARE * window.seconds:
        return "gate"
    return "model"


@dataclass(slots=True)
class Totals:
    """A node's running totals when last seen: the next window is the difference."""

    t: float
    offered: int
    lost: int
    waited_s: float

    def window(self, now: Totals) -> Window:
        return Window(
            now.t - self.t, now.offered - self.offered, now.lost - self.lost, now.waited_s - self.waited_s
        )
