"""The energy readers against fake sysfs trees (a temporary folder passed as root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe.deploy.power import sensors as power
from edgepipe.deploy.power.sensors import counter_delta_uj, hwmon_sensors, rapl_counters


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path


def rapl_zone(root: Path, zone: str, name: str, energy_uj: int, wrap_uj: int = 262_143_328_850) -> Path:
    write(root, f"sys/class/powercap/{zone}/name", name)
    write(root, f"sys/class/powercap/{zone}/max_energy_range_uj", str(wrap_uj))
    return write(root, f"sys/class/powercap/{zone}/energy_uj", str(energy_uj))


def test_counter_delta_counts_across_one_wraparound() -> None:
    assert counter_delta_uj(100, 350, 1000) == 250
    assert counter_delta_uj(900, 50, 1000) == 150  # 100 to the wrap, then 50
    with pytest.raises(ValueError, match="no wrap range"):
        counter_delta_uj(900, 50, None)


def test_rapl_reads_top_level_packages_not_their_subzones(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 5_000)
    rapl_zone(tmp_path, "intel-rapl:1", "package-1", 7_000)
    rapl_zone(tmp_path, "intel-rapl:0:0", "core", 1_000)  # inside package-0: not added again
    counters, reasons = rapl_counters(tmp_path)
    assert [c.label for c in counters] == ["RAPL package-0", "RAPL package-1"]
    assert [c.read_uj() for c in counters] == [5_000, 7_000]
    assert counters[0].wrap_uj == 262_143_328_850
    assert counters[0].scope == "CPU package"
    assert reasons == []


def test_rapl_prefers_psys_which_holds_the_packages(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 5_000)
    rapl_zone(tmp_path, "intel-rapl:1", "psys", 9_000)
    counters, _ = rapl_counters(tmp_path)
    assert [(c.label, c.scope) for c in counters] == [("RAPL psys", "platform")]


def test_rapl_unreadable_counter_is_a_reason_not_a_figure(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 5_000)
    (tmp_path / "sys/class/powercap/intel-rapl:0/energy_uj").write_text("garbage\n")
    counters, reasons = rapl_counters(tmp_path)
    assert counters == []
    assert reasons
    assert "RAPL package-0: cannot read /sys/class/powercap/intel-rapl:0/energy_uj" in reasons[0]


def test_rapl_readable_only_by_root_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    energy = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 5_000)
    real = power._read_int

    def denied(path: Path) -> int:  # the tests may run as root, where chmod does not deny
        if path == energy:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(power, "_read_int", denied)
    counters, reasons = rapl_counters(tmp_path)
    assert counters == []
    assert reasons == [
        "RAPL package-0: /sys/class/powercap/intel-rapl:0/energy_uj is readable only by root here"
    ]


def test_no_powercap_and_no_hwmon_are_reasons(tmp_path: Path) -> None:
    assert rapl_counters(tmp_path) == ([], ["no /sys/class/powercap (no Intel RAPL here)"])
    assert hwmon_sensors(tmp_path) == ([], ["no /sys/class/hwmon"])


def test_hwmon_power_input_is_microwatts(tmp_path: Path) -> None:
    write(tmp_path, "sys/class/hwmon/hwmon0/name", "acpi_power")
    write(tmp_path, "sys/class/hwmon/hwmon0/power1_input", "12500000")
    write(tmp_path, "sys/class/hwmon/hwmon1/name", "coretemp")
    write(tmp_path, "sys/class/hwmon/hwmon1/temp1_input", "45000")
    sensors, reasons = hwmon_sensors(tmp_path)
    assert [(s.label, s.scope, s.read_uw()) for s in sensors] == [("acpi_power power1", "sensor", 12_500_000)]
    assert reasons == []


def test_jetson_ina3221_rails_are_volts_times_amps(tmp_path: Path) -> None:
    dev = "sys/class/hwmon/hwmon1"
    write(tmp_path, f"{dev}/name", "ina3221")
    for n, (label, mv, ma) in enumerate([("VDD_IN", 5000, 1200), ("VDD_CPU_GPU_CV", 5000, 400)], start=1):
        write(tmp_path, f"{dev}/in{n}_label", label)
        write(tmp_path, f"{dev}/in{n}_input", str(mv))
        write(tmp_path, f"{dev}/curr{n}_input", str(ma))
    write(tmp_path, f"{dev}/in4_input", "12")  # a shunt voltage: no current channel of its own
    sensors, _ = hwmon_sensors(tmp_path)
    assert [(s.label, s.scope, s.read_uw()) for s in sensors] == [
        ("ina3221 VDD_IN", "board input", 6_000_000),
        ("ina3221 VDD_CPU_GPU_CV", "sensor", 2_000_000),
    ]


def test_nvml_without_pynvml_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # import fails as if absent
    counters, reasons = power.nvml_counters()
    assert counters == []
    assert "pynvml package is not installed" in reasons[0]
