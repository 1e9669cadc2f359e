"""Energy over a run, from the sources :mod:`edgepipe.deploy.power.sensors` finds: joules per frame
(``edgepipe trace``) and per token (``edgepipe bench lm``), or "not measurable here (REASON)".

A sampler thread reads every source each ``interval_s``: counters for their increase (so that a
counter wrapping more than once in a long run is still counted right), power sensors for the
trapezoid integral of their readings. Sensors that are parts of a whole (a Jetson's rails
besides ``VDD_IN``) are not added up: with several and none known to be the total, they are
reported as not measurable, not summed into a guess.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepipe.deploy.power.sensors import (
    EnergyCounter,
    PowerSensor,
    counter_delta_uj,
    hwmon_sensors,
    nvml_counters,
    rapl_counters,
)

INTERVAL_S = 0.1


@dataclass(frozen=True)
class Energy:
    """What one source measured over the run."""

    label: str
    scope: str
    joules: float
    seconds: float

    def per(self, count: int, unit: str) -> dict[str, Any]:
        """This energy as JSON, with joules per ``unit`` when ``count`` is above 0."""
        per = round(self.joules / count, 4) if count > 0 else None
        return {"source": self.label, "scope": self.scope, "joules": round(self.joules, 3),
                "seconds": round(self.seconds, 3), f"joules_per_{unit}": per,
                "watts": round(self.joules / self.seconds, 2) if self.seconds > 0 else None}  # fmt: skip


class EnergyMeter:
    """``start()`` then ``stop()`` around the work; :attr:`reasons` says what could not be read."""

    def __init__(self, root: Path = Path("/"), *, nvml: bool = True, interval_s: float = INTERVAL_S) -> None:
        counters, reasons = rapl_counters(root)
        sensors, more = hwmon_sensors(root)
        reasons += more
        if nvml:
            gpus, more = nvml_counters()
            counters += gpus
            reasons += more
        whole = [s for s in sensors if s.scope == "board input"]
        if whole:
            sensors = whole
        elif len(sensors) > 1:
            names = ", ".join(s.label for s in sensors)
            reasons.append(f"hwmon: {len(sensors)} power sensors ({names}), none known to be the total")
            sensors = []
        self.counters: list[EnergyCounter] = counters
        self.sensors: list[PowerSensor] = sensors
        self.reasons: list[str] = reasons
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counted_uj = [0] * len(counters)
        self._last_uj = [0] * len(counters)
        self._integral_uj = [0.0] * len(sensors)
        self._last_uw = [0.0] * len(sensors)
        self._t_last = 0.0
        self._t_start = 0.0
        self.energies: list[Energy] = []
        """What :meth:`stop` returned last."""

    @property
    def measurable(self) -> bool:
        return bool(self.counters or self.sensors)

    def not_measurable(self) -> str:
        return f"not measurable here ({'; '.join(self.reasons) or 'no energy source'})"

    def start(self) -> None:
        self._t_start = self._t_last = time.monotonic()
        self._last_uj = [c.read_uj() for c in self.counters]
        self._last_uw = [s.read_uw() for s in self.sensors]
        if self.measurable:
            self._thread = threading.Thread(target=self._sample_until_stopped, name="energy", daemon=True)
            self._thread.start()

    def stop(self) -> list[Energy]:
        """What each source measured since :meth:`start` (empty when none could be read)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self._sample()
        seconds = self._t_last - self._t_start
        out = [
            Energy(c.label, c.scope, uj / 1e6, seconds)
            for c, uj in zip(self.counters, self._counted_uj, strict=True)
        ]
        out += [
            Energy(s.label, s.scope, uj / 1e6, seconds)
            for s, uj in zip(self.sensors, self._integral_uj, strict=True)
        ]
        self.energies = out
        return out

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        now = time.monotonic()
        dt = now - self._t_last
        for i, c in enumerate(self.counters):
            value = c.read_uj()
            self._counted_uj[i] += counter_delta_uj(self._last_uj[i], value, c.wrap_uj)
            self._last_uj[i] = value
        for i, s in enumerate(self.sensors):
            watts_u = s.read_uw()
            self._integral_uj[i] += (self._last_uw[i] + watts_u) / 2 * dt
            self._last_uw[i] = watts_u
        self._t_last = now


def energy_json(meter: EnergyMeter, energies: list[Energy], count: int, unit: str) -> dict[str, Any]:
    """The ``energy`` part of a command's JSON: per source, or why it is not measurable."""
    if not energies:
        return {"measurable": False, "reason": meter.not_measurable(), "sources": []}
    return {"measurable": True, "reason": None, "sources": [e.per(count, unit) for e in energies]}


def energy_lines(energy: dict[str, Any], unit: str) -> list[str]:
    """``energy: 0.412 J/frame (RAPL package-0, CPU package; 9.8 W over 3.0 s)`` per source."""
    if not energy["measurable"]:
        return [f"energy: {energy['reason']}"]
    lines = []
    for s in energy["sources"]:
        per = s[f"joules_per_{unit}"]
        figure = f"{per:.4g} J/{unit}" if per is not None else f"{s['joules']:.3g} J (no {unit}s)"
        lines.append(f"energy: {figure} ({s['source']}, {s['scope']}; {s['watts']} W over {s['seconds']} s)")
    return lines
