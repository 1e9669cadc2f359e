"""The CPU budget: the cores the process may use x the target share (a governed run's own).

The cores come from the CPU affinity (``taskset``, cpusets) and the cgroup's quota (cgroup v2
``cpu.max``, v1 ``cpu.cfs_quota_us``), whichever is smaller, so ``docker run --cpus=2`` on a
16-core box gives 2. The target (default ``1 -`` :data:`~edgepipe.core.headroom.HEADROOM`, 0.70)
leaves the rest to the system: the kernel, other services, a burst of decode work.

Thread pools are sized once from it (ONNX Runtime intra-op threads per session); thread counts
cannot change on a live session, so what the budget bounds at run time is admission: heavy
calls take units of it through the :class:`~edgepipe.sched.gate.Gate` (see there).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from edgepipe.core.headroom import HEADROOM
from edgepipe.core.scope import Slot

DEFAULT_TARGET = 1 - HEADROOM
"""The share of the usable cores a governed run keeps busy at most, unless it says otherwise."""

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class Cores:
    """How many cores this process may use, and what limits it."""

    usable: float
    affinity: int
    quota: float | None
    """The cgroup's quota in cores (None: unlimited)."""

    @property
    def limited_by(self) -> str:
        if self.quota is not None and self.quota < self.affinity:
            return f"cgroup quota {self.quota:g}"
        return f"affinity {self.affinity}"


def usable_cores(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> Cores:
    """The cores this process may keep busy: affinity ∩ the cgroup quota (the tightest level)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        affinity = os.cpu_count() or 1
    quota = cgroup_quota(cgroup_root, proc_cgroup)
    usable = float(affinity) if quota is None else min(float(affinity), quota)
    return Cores(usable=max(usable, 0.1), affinity=affinity, quota=quota)


def cgroup_quota(
    cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")
) -> float | None:
    """The smallest CPU quota (in cores) on the way from this process's cgroup to the root."""
    quotas: list[float] = []
    for directory in _cgroup_dirs(cgroup_root, proc_cgroup):
        value = _read_quota(directory)
        if value is not None:
            quotas.append(value)
    return min(quotas) if quotas else None


def _cgroup_dirs(root: Path, proc_cgroup: Path) -> list[Path]:
    """Candidate directories holding the quota files: v2 (``0::/path``) and v1 (``cpu`` controller),
    each level from the process's own group up to the root."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return [root]
    dirs: list[Path] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":
            base = root
        elif "cpu" in controllers.split(","):
            base = root / controllers if (root / controllers).is_dir() else root / "cpu,cpuacct"
        else:
            continue
        here = base / rel.lstrip("/")
        while True:
            dirs.append(here)
            if here == base or base not in here.parents:
                break
            here = here.parent
    return dirs or [root]


def _read_quota(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((directory / "cpu.cfs_quota_us").read_text())
        period_us = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


@dataclass(frozen=True, slots=True)
class CpuBudget:
    """The cores this process may use and the share of them it aims to keep busy at most."""

    cores: Cores
    target: float = DEFAULT_TARGET
    """The share of the usable cores the process should stay under (1 - headroom)."""
    governed: bool = True
    video_streams: int = 0
    """Video decoders the run opens (its video sources): they share the cores with the models."""
    model_nodes: int = 0
    """Nodes of the run that load a model (detectors, language models: ``loads_model``)."""

    def __post_init__(self) -> None:
        if not (0 < self.target <= 1) or math.isnan(self.target):
            raise ValueError(f"target must be in (0, 1], got {self.target}")

    @property
    def cores_budget(self) -> float:
        """Cores' worth of CPU the process may keep busy: ``usable x target``."""
        return self.cores.usable * self.target

    @property
    def units(self) -> int:
        """Heavy calls' worth of the budget, one unit per core-thread, at least one: what the
        gate admits at once (2 cores x 0.7 = 1 unit; 8 x 0.7 = 5)."""
        return max(1, math.floor(self.cores_budget + 1e-9))

    @property
    def spare_units(self) -> int:
        """The budget's fraction past ``units``, as whole units that only low-priority calls
        (token decode) use, paced by the governor: on 2 cores x 0.7 = 1.4, detection holds one
        unit and a language model runs beside it in the spare one, on the other core, instead
        of waiting for each detection to end; the governor then paces it to keep the process at
        its target, so the budget is spent rather than left at 1.0 of 1.4."""
        return max(0, math.ceil(self.cores_budget - 1e-9) - self.units)

    @property
    def threads(self) -> int:
        """Intra-op threads of an ONNX Runtime session: one model alone may use the budget."""
        return self.units

    @property
    def instances(self) -> int:
        """Calls in flight a node declared with ``instances="auto"`` runs (a detector, by
        default): as many one-thread calls as the gate admits at once, its main units and its
        spare ones (2 cores x 0.7 = 1.4: two, the second paced by the governor; 8 x 0.7 = 5.6:
        six). One when ungoverned: without the gate and the governor, a second call would only
        fight the rest of the pipeline for the same cores."""
        return self.units + self.spare_units if self.governed else 1

    def call_threads(self, calls: int, *, latency: bool = False) -> int:
        """Intra-op threads of each of a model's ``calls`` in flight: for throughput, the units
        shared among them (one each with ``instances="auto"``: a second intra-op thread costs
        15-20% more CPU a run beside other work); for ``latency``, :attr:`latency_threads`."""
        return self.latency_threads if latency else max(1, self.units // max(1, calls))

    @property
    def latency_threads(self) -> int:
        """Intra-op threads of a model that asks for latency over throughput
        (``Detector(prefer="latency")``: one call in flight, as wide as the budget allows):
        :attr:`threads`, and the spare units' too when the run has them to give: one model and
        fewer video streams than cores. CenterFace at 640x480 took 54 ms a run on one thread and
        28 ms on two, for 5% more CPU a run on quiet cores and 15-20% more where other work
        shares them: it halves the latency, and costs frames, so it is never the
        default. Its runs still hold one unit at the gate, so encodes and token decode keep the
        spare one; the governor holds the process to its target over time."""
        if self.spare_units and self.model_nodes == 1 and self.video_streams < self.cores.usable:
            return self.units + self.spare_units
        return self.threads

    @property
    def decoder_threads(self) -> int:
        """Threads per software video decoder; 0 lets FFmpeg choose (cores + 1).

        One stream alone gets FFmpeg's frame threads (its latency is the frame rate's). With
        as many streams as usable cores or more, each decoder keeps one thread: the streams
        already keep every core busy in parallel, and frame threading costs CPU of its own (a
        1080p H.264 frame took 2.1 CPU-ms on one thread, 2.7 on FFmpeg's three, here), while
        its extra runnable threads preempt the model runs sharing those cores."""
        streams = self.video_streams
        if streams <= 1:
            return 0
        return max(1, math.floor(self.cores.usable / streams))

    def describe(self) -> str:
        c = self.cores
        mode = "governed" if self.governed else "ungoverned (--no-governor)"
        spare = f" (+{self.spare_units} spare)" if self.spare_units and self.governed else ""
        wide_text = f"; {self.instances} calls in flight for a model node" if self.instances > 1 else ""
        threads = self.decoder_threads
        decoders = (
            f"{threads} thread(s) per video decoder ({self.video_streams} streams); " if threads else ""
        )
        return (
            f"CPU budget: {c.usable:g} usable core(s) ({c.limited_by}) x {self.target:.2f} = "
            f"{self.cores_budget:.2f}; {self.units} heavy call unit(s) at once{spare}; "
            f"{self.threads} ONNX Runtime thread(s) per model{wide_text}; {decoders}{mode}"
        )


_BUDGET: CpuBudget | None = None


def process_budget() -> CpuBudget:
    """The process's budget, outside any run (made on first use from the defaults)."""
    global _BUDGET
    if _BUDGET is None:
        _BUDGET = CpuBudget(usable_cores())
    return _BUDGET


BUDGET = Slot("CPU budget", process_budget)
"""A governed run's own budget (its :class:`~edgepipe.sched.scheduler.Scheduler`'s)."""


def cpu_budget() -> CpuBudget:
    """The budget of the run the caller works for (:mod:`edgepipe.core.scope`), else the
    process's."""
    return BUDGET.get()


def set_budget(budget: CpuBudget) -> CpuBudget:
    """Make ``budget`` the process's, outside any run (a script's, before its models load: their
    thread counts come from it). Runs keep their own."""
    global _BUDGET
    _BUDGET = budget
    return budget
