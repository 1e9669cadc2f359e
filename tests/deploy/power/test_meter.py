"""The energy meter over fake sysfs trees: counters (with a wraparound), sensors integrated,
and "not measurable here" with its reasons."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgepipe.deploy.power.meter import EnergyMeter, energy_json, energy_lines
from tests.deploy.power.test_sensors import rapl_zone, write


def test_counter_energy_across_a_wraparound(tmp_path: Path) -> None:
    energy = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 999_000_000, wrap_uj=1_000_000_000)
    meter = EnergyMeter(tmp_path, nvml=False, interval_s=60)  # samples at start and stop only
    meter.start()
    energy.write_text("4000000\n")  # wrapped: 1 J to the wrap, then 4 J
    [got] = meter.stop()
    assert got.label == "RAPL package-0"
    assert got.joules == 5.0
    data = energy_json(meter, [got], 10, "frame")
    assert data["measurable"] is True
    assert data["sources"][0]["joules_per_frame"] == 0.5
    assert energy_lines(data, "frame")[0].startswith("energy: 0.5 J/frame (RAPL package-0, CPU package;")


def test_a_constant_power_integrates_to_that_power(tmp_path: Path) -> None:
    write(tmp_path, "sys/class/hwmon/hwmon0/name", "ina3221")
    write(tmp_path, "sys/class/hwmon/hwmon0/in1_label", "VDD_IN")
    write(tmp_path, "sys/class/hwmon/hwmon0/in1_input", "5000")
    write(tmp_path, "sys/class/hwmon/hwmon0/curr1_input", "1000")  # 5 W
    write(tmp_path, "sys/class/hwmon/hwmon0/in2_label", "VDD_SOC")
    write(tmp_path, "sys/class/hwmon/hwmon0/in2_input", "5000")
    write(tmp_path, "sys/class/hwmon/hwmon0/curr2_input", "300")
    meter = EnergyMeter(tmp_path, nvml=False, interval_s=0.01)
    assert [s.label for s in meter.sensors] == ["ina3221 VDD_IN"]  # the total only, never a sum of rails
    meter.start()
    time.sleep(0.05)  # a few samples
    [got] = meter.stop()
    assert got.seconds > 0
    assert got.joules == pytest.approx(5.0 * got.seconds)


def test_several_sensors_without_a_total_are_not_summed(tmp_path: Path) -> None:
    for n in (0, 1):
        write(tmp_path, f"sys/class/hwmon/hwmon{n}/name", f"chip{n}")
        write(tmp_path, f"sys/class/hwmon/hwmon{n}/power1_input", "1000000")
    meter = EnergyMeter(tmp_path, nvml=False)
    assert not meter.measurable
    meter.start()
    data = energy_json(meter, meter.stop(), 10, "token")
    assert data["measurable"] is False
    assert data["reason"].startswith(
        "not measurable here (no /sys/class/powercap (no Intel RAPL here); hwmon: 2"
    )
    assert energy_lines(data, "token") == [f"energy: {data['reason']}"]
