"""The figures of the privacy benchmark (:mod:`.bench`), from what it measured: pure functions only.

A round leaves the pipeline's progress marks (:class:`Mark`: its process's CPU when it logged
reaching a frame) and the bare parts (:class:`Part`: CPU over units, and units per recorded
frame). :func:`steady` turns the marks into CPU-ms per frame; :func:`combine` takes the rounds'
medians and returns the ratio the benchmark judges.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

TARGET_RATIO = 1.1
"""The pipeline's CPU per frame within 1.1x the sum of its parts' bare costs."""
WARMUP_MARKS = 1
"""Progress lines left out at the start (the first model run at the input size is slow)."""
PROGRESS = re.compile(r"\bframe (\d+): \d+ face\(s\)")


@dataclass(frozen=True, slots=True)
class Mark:
    """The pipeline's process when it logged reaching a frame."""

    frame: int
    cpu_s: float
    """User + system CPU seconds of the process so far (all its threads)."""
    machine_busy_s: float
    """Busy CPU seconds of the whole machine so far (``/proc/stat``)."""
    t: float
    """Seconds, any monotonic clock."""


@dataclass(frozen=True, slots=True)
class Part:
    """One part measured alone: ``cpu_s`` over ``units`` (frames, model runs)."""

    name: str
    cpu_s: float
    units: int
    per_frame: float = 1.0
    """Units the pipeline did per recorded frame (model runs / frames, decoded / recorded)."""

    @property
    def ms_per_unit(self) -> float:
        return 1000.0 * self.cpu_s / self.units if self.units else math.nan

    @property
    def ms_per_frame(self) -> float:
        return self.ms_per_unit * self.per_frame


@dataclass(frozen=True, slots=True)
class Round:
    """One run of the pipeline and one of the bare loops, back to back."""

    pipeline_ms: float | None
    """The pipeline's steady CPU-ms per recorded frame (None: too few progress lines)."""
    parts: list[Part] = field(default_factory=list)
    others_pipeline: float | None = None
    """Other processes' CPU while the pipeline ran, in cores."""
    others_bare: float | None = None
    """Other processes' CPU while the bare loops ran, in cores."""

    @property
    def parts_ms(self) -> float:
        return sum_ms_per_frame(self.parts)

    @property
    def ratio(self) -> float | None:
        return ratio(self.pipeline_ms, self.parts_ms)


def progress_frame(line: str) -> int | None:
    """The frame number of a face_privacy progress line (``camera frame 31: 1 face(s), ...``)."""
    found = PROGRESS.search(line)
    return int(found.group(1)) if found else None


def others_cores(busy_s: float, ours_s: float, wall_s: float) -> float | None:
    """Other processes' mean CPU in cores: the machine's busy seconds less ours, over the wall."""
    return max(0.0, busy_s - ours_s) / wall_s if wall_s > 0 else None


def steady(marks: Sequence[Mark], warmup: int = WARMUP_MARKS) -> dict[str, float] | None:
    """CPU-ms per frame between the mark after ``warmup`` and the last, with the frames and wall
    seconds between them, the process's cores and the other processes' (``others_cores``);
    None if fewer than two marks are left or no frame passed between them."""
    kept = marks[warmup:]
    if len(kept) < 2 or kept[-1].frame <= kept[0].frame:
        return None
    a, b = kept[0], kept[-1]
    frames, cpu_s, wall_s = b.frame - a.frame, b.cpu_s - a.cpu_s, b.t - a.t
    others = others_cores(b.machine_busy_s - a.machine_busy_s, cpu_s, wall_s)
    return {"cpu_ms_per_frame": 1000.0 * cpu_s / frames, "frames": frames, "wall_s": wall_s,
            "cpu_cores": cpu_s / wall_s if wall_s > 0 else math.nan,
            "others_cores": math.nan if others is None else others}  # fmt: skip


def model_runs(frames: int, every: int) -> int:
    """Model runs of a detector with ``every`` over ``frames`` frames of one source: the first
    frame and one in ``every`` after it."""
    return math.ceil(frames / every) if frames > 0 else 0


def sum_ms_per_frame(parts: Sequence[Part]) -> float:
    """What a frame costs at the parts' bare costs, each weighted by its units per frame."""
    return sum(p.ms_per_frame for p in parts)


def ratio(pipeline_ms: float | None, parts_ms: float) -> float | None:
    """Pipeline over the sum of its parts (None when either is unknown or the sum is 0)."""
    if pipeline_ms is None or not parts_ms or math.isnan(parts_ms):
        return None
    return pipeline_ms / parts_ms


def verdict(value: float | None, target: float = TARGET_RATIO) -> bool:
    """Whether the ratio meets the target (an unknown one does not)."""
    return value is not None and value <= target


def combine(rounds: Sequence[Round]) -> tuple[float | None, list[Part], float | None]:
    """The rounds' medians: (pipeline CPU-ms per frame, each part at its median CPU per unit
    with its units per frame, pipeline / sum of those parts). Rounds without a pipeline figure
    count for the parts only."""
    measured = [r.pipeline_ms for r in rounds if r.pipeline_ms is not None]
    pipeline_ms = statistics.median(measured) if measured else None
    parts: list[Part] = []
    for name in dict.fromkeys(p.name for r in rounds for p in r.parts):
        mine = [p for r in rounds for p in r.parts if p.name == name]
        per_unit_ms = statistics.median(p.ms_per_unit for p in mine)
        units = round(statistics.median(p.units for p in mine))
        per_frame = statistics.median(p.per_frame for p in mine)
        parts.append(Part(name, per_unit_ms * units / 1000.0, units, per_frame))
    return pipeline_ms, parts, ratio(pipeline_ms, sum_ms_per_frame(parts))
