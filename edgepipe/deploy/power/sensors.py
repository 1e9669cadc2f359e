"""Where this machine exposes energy: Intel RAPL counters, hwmon power sensors, NVML.

Each reader takes ``root`` (``/`` on a device; a temporary folder holding a fake sysfs tree in
tests) and returns what it found and, for what it could not use, one line saying why:

- **Intel RAPL** (``/sys/class/powercap/intel-rapl:N/energy_uj``): a counter of microjoules
  per top-level zone (``package-N``; ``psys``, the whole platform, where the firmware has it),
  wrapping at ``max_energy_range_uj``. Since Linux 5.10 (CVE-2020-8694) it is readable only by
  root unless the administrator opens it.
- **hwmon** (``/sys/class/hwmon/hwmonN/``): ``powerN_input`` in microwatts; the INA3221 of
  NVIDIA Jetson boards gives ``inN_input`` (millivolts) and ``currN_input`` (milliamps) per
  rail, named by ``inN_label`` (``VDD_IN``: the module's input, everything). A power reading
  is sampled, so energy is integrated over time by :mod:`edgepipe.deploy.power.meter`.
- **NVML** (the ``pynvml`` package, only when importable): each GPU's
  ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded (Volta and later).

Nothing is estimated: a source that cannot be read is left out, with its reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from edgepipe.core.install import install_command

_RAPL_TOP = re.compile(r"^intel-rapl:\d+$")
TOTAL_RAILS = ("VDD_IN",)
"""INA3221 rail labels that measure a Jetson module's whole input (NVIDIA Jetson Linux
Developer Guide, "Power Monitoring"); the other rails are parts of it."""


@dataclass(frozen=True)
class EnergyCounter:
    """A counter of energy in microjoules that only grows (until it wraps)."""

    label: str
    scope: str
    """What it covers: ``CPU package``, ``platform``, ``GPU``."""
    read_uj: Callable[[], int]
    wrap_uj: int | None
    """The value past which it starts again from 0 (None: it does not wrap)."""


@dataclass(frozen=True)
class PowerSensor:
    """An instantaneous power reading in microwatts."""

    label: str
    scope: str
    """``board input`` for a whole-input rail, ``rail`` for a part, ``sensor`` when unknown."""
    read_uw: Callable[[], float]


def counter_delta_uj(start_uj: int, end_uj: int, wrap_uj: int | None) -> int:
    """Energy between two readings of a counter, across one wraparound at ``wrap_uj``."""
    if end_uj >= start_uj:
        return end_uj - start_uj
    if wrap_uj is None:
        raise ValueError(f"counter went back from {start_uj} to {end_uj} and has no wrap range")
    return wrap_uj - start_uj + end_uj


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def _text(path: Path, default: str) -> str:
    try:
        return path.read_text().strip() or default
    except OSError:
        return default


def rapl_counters(root: Path = Path("/")) -> tuple[list[EnergyCounter], list[str]]:
    """The top-level RAPL zones that can be read (``psys`` alone where there is one: it holds
    the packages), and why the others cannot."""
    base = root / "sys/class/powercap"
    if not base.is_dir():
        return [], ["no /sys/class/powercap (no Intel RAPL here)"]
    found: list[EnergyCounter] = []
    reasons: list[str] = []
    for zone in sorted(p for p in base.iterdir() if _RAPL_TOP.match(p.name)):
        name = _text(zone / "name", zone.name)
        energy = zone / "energy_uj"
        try:
            _read_int(energy)
            wrap = _read_int(zone / "max_energy_range_uj")
        except PermissionError:
            reasons.append(f"RAPL {name}: /{energy.relative_to(root)} is readable only by root here")
            continue
        except (OSError, ValueError) as exc:
            reasons.append(f"RAPL {name}: cannot read /{energy.relative_to(root)} ({exc})")
            continue
        scope = "platform" if name == "psys" else "CPU package"

        def read(path: Path = energy) -> int:
            return _read_int(path)

        found.append(EnergyCounter(f"RAPL {name}", scope, read, wrap))
    if not found and not reasons:
        reasons.append("/sys/class/powercap has no intel-rapl zone")
    platform = [c for c in found if c.scope == "platform"]
    return (platform or found), reasons


def hwmon_sensors(root: Path = Path("/")) -> tuple[list[PowerSensor], list[str]]:
    """Power sensors of hwmon devices that can be read, and why the others cannot."""
    base = root / "sys/class/hwmon"
    if not base.is_dir():
        return [], ["no /sys/class/hwmon"]
    found: list[PowerSensor] = []
    reasons: list[str] = []
    for dev in sorted(base.iterdir()):
        chip = _text(dev / "name", dev.name)
        for power in sorted(dev.glob("power*_input")):
            n = power.name[len("power") : -len("_input")]
            label = _text(dev / f"power{n}_label", f"power{n}")
            _add(found, reasons, root, f"{chip} {label}", _scope(label), power, partial(_read_int, power))
        for curr in sorted(dev.glob("curr*_input")):
            n = curr.name[len("curr") : -len("_input")]
            volts = dev / f"in{n}_input"
            if not volts.is_file():
                continue
            label = _text(dev / f"in{n}_label", f"channel {n}")

            def read(v: Path = volts, c: Path = curr) -> float:
                return _read_int(v) * _read_int(c)  # mV x mA = uW

            _add(found, reasons, root, f"{chip} {label}", _scope(label), curr, read)
    if not found and not reasons:
        reasons.append("no hwmon power sensor (powerN_input, or inN_input with currN_input)")
    return found, reasons


def _scope(label: str) -> str:
    return "board input" if label.upper() in TOTAL_RAILS else "sensor"


def _add(found: list[PowerSensor], reasons: list[str], root: Path, label: str, scope: str,
         path: Path, read: Callable[[], float]) -> None:  # fmt: skip
    try:
        read()
    except (OSError, ValueError) as exc:
        why = "readable only by root here" if isinstance(exc, PermissionError) else f"unreadable ({exc})"
        reasons.append(f"hwmon {label}: /{path.relative_to(root)} {why}")
        return
    found.append(PowerSensor(label, scope, read))


def nvml_counters() -> tuple[list[EnergyCounter], list[str]]:
    """Each NVIDIA GPU's energy counter, through ``pynvml`` when it is installed."""
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return [], [f"NVML: the pynvml package is not installed ({install_command(package='nvidia-ml-py')})"]
    try:
        pynvml.nvmlInit()
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)

            def read(h: object = handle) -> int:
                return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(h)) * 1000  # mJ -> uJ

            read()
            found.append(EnergyCounter(f"NVML GPU {i}", "GPU", read, None))
    except pynvml.NVMLError as exc:
        return [], [f"NVML: {exc}"]
    return found, ([] if found else ["NVML: no GPU"])
