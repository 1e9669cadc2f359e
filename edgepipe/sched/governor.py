"""The governor: keeps the process's CPU use at or under its target by turning knobs.

Knobs lower the rate of work of one node each, in a fixed order (the *ladder*): token-decode
pacing and a detector's second call in flight first, then the detection interval, then frames
thinned on lossy frame lanes, each
group from the lowest node priority to the highest (so a recorder's frames go last). A knob
that a pipeline pins (a privacy detector that must see every frame) is not on the ladder.

Every ``update`` gets the CPU use over the last window (a fraction of the usable cores). Over
the target by more than ``slack`` (2 points), it climbs (more rungs the further over); under it
by more than what the last rung is known to cost (plus a band), it steps back down one rung.
What a rung costs is learnt: the CPU drop seen after climbing it, raised again whenever
stepping down had to be undone, so a load near the target settles instead of see-sawing. After
each move it waits ``settle_s`` (the measurement window) so that the next decision sees the
effect of the last. A hot device lowers the target. Pure logic on a clock it is given: the
scheduler feeds it, tests drive it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger("edgepipe.sched")

UNDONE_S = 3.0
"""A climb back up this soon after a step down undoes it (that rung costs more than was
thought); later, the load changed (a spike: a looped clip reopened every 8 s made every step
down look undone, and the rungs' costs climbed until the CPU sat 10 points under the target)."""

SLACK = 0.02
"""How far over the target a window may be before the governor climbs (a share of the usable
cores): a 1 s average sitting on the target wavers by a point or two, and chasing that would
slow work for nothing."""
BAND = 0.01
"""How much room under the target a step down must leave, past what the rung costs."""
WINDOW = SLACK + BAND
"""The governor's window between climbing (target + :data:`SLACK`) and stepping down (target -
:data:`BAND`): a rung that costs about this much lets it settle next to its target."""

RANKS = {"pace": 0, "instances": 0, "every": 1, "thin": 2}
"""Which kind of knob is turned first (then the lower priority first; a node's own knobs in the
order it gives them: a pinned detector sheds its second call before its pace)."""


class Knob(Protocol):
    """One rate the governor may lower: levels ``0`` (full rate) to ``levels - 1``."""

    node_id: str
    kind: str
    """``pace``, ``instances``, ``every`` or ``thin``."""
    priority: int
    levels: int
    level: int

    def set(self, level: int) -> None: ...

    def describe(self) -> str:
        """The current setting in words (``paced to 25% of the time``)."""
        ...


@dataclass
class Decision:
    """One move of the governor, with the figures behind it."""

    t: float
    cpu: float
    target: float
    old: int
    new: int
    changes: list[str] = field(default_factory=list)

    @property
    def direction(self) -> str:
        return "slower" if self.new > self.old else "faster"

    def text(self, rungs: int) -> str:
        return (
            f"governor: CPU {self.cpu:.0%} of the usable cores vs target {self.target:.0%}: "
            f"{'; '.join(self.changes) or 'no change'} (level {self.new}/{rungs})"
        )


class Governor:
    """See the module docstring."""

    def __init__(
        self,
        knobs: Sequence[Knob],
        target: float,
        *,
        settle_s: float = 1.0,
        band: float = BAND,
        slack: float = SLACK,
        hot_c: float = 80.0,
        default_cost: float = 0.05,
        min_cost: float = 0.005,
        max_cost: float = 0.08,
    ) -> None:
        self.knobs = list(knobs)
        self.target = target
        self.settle_s = settle_s
        self.band = band
        self.slack = slack
        """See :data:`SLACK`."""
        self.hot_c = hot_c
        self.min_cost = min_cost
        self.max_cost = max_cost
        """A rung is taken to save at most this much, whatever one window seemed to show: the
        rungs are made a few points each, and a 1 s window of model runs of 160 ms swings by 5-10
        points by itself (a clip that loops, a run more or less in the window). A rung once
        thought to cost a spike's worth kept the CPU 10-15 points under the target for 15 s and
        more (``scripts/bench/headroom/bench.py`` on 2 cores), waiting for room it would never see."""
        """A rung that seemed to save nothing (its effect hidden by noise, or by work that was
        waiting anyway) is still taken to save this much, so a climb across such rungs ends."""
        self.ladder: list[tuple[Knob, int]] = []
        for knob in sorted(self.knobs, key=lambda k: (RANKS.get(k.kind, 9), k.priority)):
            self.ladder.extend((knob, level) for level in range(1, knob.levels))
        self.level = 0
        self._cost = [default_cost] * (len(self.ladder) + 1)
        self._floor = [0.0] * (len(self.ladder) + 1)
        self._changed_at = float("-inf")
        self._pending: tuple[int, int, float] | None = None
        """The last move (old level, new level, CPU before it), until its effect is measured."""
        self.ups = 0
        self.downs = 0
        self.decisions: list[Decision] = []
        """The latest moves (bounded)."""

    @property
    def rungs(self) -> int:
        return len(self.ladder)

    def target_now(self, temp_c: float | None) -> float:
        """The target, lowered by 0.1 on a hot device and by 0.2 at 10 °C hotter."""
        if temp_c is None or temp_c < self.hot_c:
            return self.target
        return max(0.1, self.target - (0.2 if temp_c >= self.hot_c + 10 else 0.1))

    def update(self, cpu: float, now: float, temp_c: float | None = None) -> Decision | None:
        """Given the CPU use over the last window, maybe move; returns the move made.

        Over the target by more than ``slack``, it climbs as many rungs as their learnt costs
        say it takes to get back under (at least one); under it by more than ``band``, it
        steps down as many rungs as fit in the room, by the same costs. Restoring work is as
        quick as shedding it, and a rung whose step down had to be undone costs more next
        time, so the two settle instead of see-sawing."""
        if now - self._changed_at < self.settle_s:
            return None
        self._learn(cpu)
        target = self.target_now(temp_c)
        over = cpu - target
        if over > self.slack and self.level < self.rungs:
            new, shed = self.level, 0.0
            while new < self.rungs and (new == self.level or shed < over):
                new += 1
                shed += self._cost[new]
            return self._move(new, cpu, target, now)
        if self.level > 0 and cpu + self._cost[self.level] <= target - self.band:
            new, added = self.level, 0.0
            while new > 0 and cpu + added + self._cost[new] <= target - self.band:
                added += self._cost[new]
                new -= 1
            return self._move(new, cpu, target, now)
        return None

    def _learn(self, cpu: float) -> None:
        if self._pending is None:
            return
        old, new, before = self._pending
        self._pending = None
        if new > old:  # climbed: each rung saved its share of the drop
            per_rung = min(self.max_cost, max(self.min_cost * (new - old), before - cpu) / (new - old))
            for level in range(old + 1, new + 1):
                # A rung whose step down had to be undone keeps the higher cost it was given.
                self._cost[level] = max(per_rung, self._floor[level])
        else:  # stepped down: the rungs cost what CPU rose by (halfway there: one window is
            # noisy), never under what undoing one showed; undoing one later doubles that
            per_rung = min(self.max_cost, max(0.0, cpu - before) / (old - new))
            for level in range(new + 1, old + 1):
                self._cost[level] = max(self._floor[level], (self._cost[level] + per_rung) / 2)

    def _move(self, new: int, cpu: float, target: float, now: float) -> Decision:
        old = self.level
        last = self.decisions[-1] if self.decisions else None
        if new > old and last is not None and (last.old, last.new) == (new, old) and now - last.t <= UNDONE_S:
            # Stepping down from ``new`` had to be undone: that rung costs more than was thought.
            self._cost[new] = max(2 * self._cost[new], 0.05)
            self._floor[new] = self._cost[new]
        changes = self._apply(old, new)
        self.level = new
        self._changed_at = now
        self._pending = (old, new, cpu)
        if new > old:
            self.ups += 1
        else:
            self.downs += 1
        decision = Decision(now, cpu, target, old, new, changes)
        self.decisions.append(decision)
        del self.decisions[:-32]
        log.info("%s", decision.text(self.rungs))
        return decision

    def _apply(self, old: int, new: int) -> list[str]:
        lo, hi = min(old, new), max(old, new)
        touched: list[Knob] = []
        for knob, _ in self.ladder[lo:hi]:
            if knob not in touched:
                touched.append(knob)
        changes = []
        for knob in touched:
            level = sum(1 for k, _ in self.ladder[:new] if k is knob)
            knob.set(level)
            changes.append(f"{knob.node_id} {knob.describe()}")
        return changes

    def settings(self) -> list[dict[str, object]]:
        """Every knob's current setting (pinned ones are not knobs here)."""
        return [
            {"node": k.node_id, "knob": k.kind, "level": getattr(k, "level", 0), "setting": k.describe()}
            for k in self.knobs
        ]
