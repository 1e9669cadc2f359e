"""Measuring load over a sliding window: the process's CPU, busy time per resource, heat.

Samples are taken every ``interval_s`` (0.1 s) and the window (1 s) is the span between the
newest sample and the newest one at least ``window_s`` older, so a figure is always a real
average over a second or a little more (when the loop's ticks stretch under load), updated ten
times a second. CPU is the process's user + system time (``os.times()``:
every thread, native ones included) over wall time, as a fraction of the usable cores. Busy
time per resource is what the nodes record for each call (exact, not sampled), as a fraction
of the resource's worker threads. Temperature is the hottest ``/sys/class/thermal`` zone;
accelerator use is read where the device exposes it (Jetson's ``gpu.0/load``, the DRM
``gpu_busy_percent`` of AMD and Intel GPUs). Neither needs a new dependency.
"""

from __future__ import annotations

import glob
import os
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


def process_cpu_s() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    t = os.times()
    return t.user + t.system


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    cpu_s: float
    busy_s: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Load:
    """The figures over the latest window."""

    cpu: float
    """The process's CPU use over the window, as a fraction of its usable cores."""
    window_s: float
    resources: dict[str, float]
    """Busy fraction of each resource's worker threads over the window."""


class LoadMeter:
    """A bounded ring of samples; :meth:`load` averages over the latest window."""

    def __init__(
        self,
        cores: float,
        workers: Mapping[str, int],
        *,
        window_s: float = 1.0,
        interval_s: float = 0.1,
        cpu_s: Callable[[], float] = process_cpu_s,
    ) -> None:
        self.cores = cores
        self.workers = dict(workers)
        self.window_s = window_s
        self._cpu_s = cpu_s
        self._samples: deque[Sample] = deque(maxlen=int(window_s / interval_s) + 2)

    def sample(self, now: float, busy_s: Mapping[str, float]) -> None:
        self._samples.append(Sample(now, self._cpu_s(), busy_s))

    def load(self) -> Load | None:
        """The window's figures (None until two samples exist)."""
        if len(self._samples) < 2:
            return None
        last = self._samples[-1]
        first = self._samples[0]
        for s in reversed(self._samples):  # the newest sample at least a window old
            if last.t - s.t >= self.window_s - 1e-6:
                first = s
                break
        dt = last.t - first.t
        if dt <= 0:
            return None
        cpu = (last.cpu_s - first.cpu_s) / dt / self.cores
        resources = {
            name: round((busy - first.busy_s.get(name, 0.0)) / dt / max(1, self.workers.get(name, 1)), 4)
            for name, busy in last.busy_s.items()
        }
        return Load(cpu=max(0.0, cpu), window_s=dt, resources=resources)


def temperature_c(root: str = "/sys/class/thermal") -> float | None:
    """The hottest thermal zone in °C (None where there are none, as in most VMs)."""
    hottest: float | None = None
    for path in glob.glob(os.path.join(root, "thermal_zone*", "temp")):
        try:
            value = int(Path(path).read_text().strip()) / 1000
        except (OSError, ValueError):
            continue
        if -40 < value < 150:  # a zone that is not a sensor reads 0 or garbage
            hottest = value if hottest is None else max(hottest, value)
    return hottest


ACCELERATOR_FILES = (
    ("/sys/devices/gpu.0/load", 1000.0),  # Jetson: per mille
    ("/sys/devices/platform/gpu.0/load", 1000.0),
    ("/sys/devices/platform/bus@0/17000000.gpu/load", 1000.0),  # Jetson Orin
)


def accelerator_busy() -> float | None:
    """The accelerator's busy fraction where the device reports it, else None."""
    for path, scale in ACCELERATOR_FILES:
        try:
            return int(Path(path).read_text().strip()) / scale
        except (OSError, ValueError):
            continue
    for path in glob.glob("/sys/class/drm/card*/device/gpu_busy_percent"):
        try:
            return int(Path(path).read_text().strip()) / 100
        except (OSError, ValueError):
            continue
    return None
