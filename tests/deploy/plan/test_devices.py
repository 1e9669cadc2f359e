from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from edgepipe.deploy.plan.devices import (
    UnknownDevice,
    devices,
    devices_named,
    find_device,
    parse_stream_limit,
)


def test_every_data_file_names_its_source_and_every_unsure_field_exists() -> None:
    folder = resources.files("edgepipe.deploy") / "data" / "devices"
    files = [f for f in folder.iterdir() if f.name.endswith(".toml")]
    assert len(files) >= 5
    for file in files:
        data = tomllib.loads(file.read_text())
        assert len(data["source"]) > 20, file.name
    for device in devices().values():
        assert set(device.unsure) <= {"bandwidth_gb_s", "ram_gb", "compute_tops", "decode"}, device.name
        assert device.bandwidth_gb_s, device.name
        assert device.ram_gb, device.name


def test_the_families_the_issue_names_are_there() -> None:
    names = " ".join(devices())
    for family in ("jetson-orin-nano", "jetson-orin-nx", "jetson-agx-orin", "raspberry-pi-5", "rk3588",
                   "intel-n100", "apple-m", "hailo-8"):  # fmt: skip
        assert family in names


def test_a_name_is_found_whatever_its_case_and_separators() -> None:
    assert find_device("Jetson_Orin_Nano_8GB").bandwidth_gb_s == 68.0


def test_a_typo_suggests_the_nearest_names() -> None:
    with pytest.raises(UnknownDevice, match=r"did you mean 'raspberry-pi-5'"):
        find_device("raspbery-pi-5")
    with pytest.raises(UnknownDevice, match="--list-devices") as caught:
        find_device("zzz")
    assert "did you mean" not in str(caught.value)


def test_stream_limits() -> None:
    limit = parse_stream_limit("11x1920x1080@30")
    assert (limit.count, limit.width, limit.height, limit.fps) == (11, 1920, 1080, 30)
    assert limit.pixel_rate == 11 * 1920 * 1080 * 30
    with pytest.raises(ValueError, match="COUNTxWIDTHxHEIGHT@FPS"):
        parse_stream_limit("1080p30")


def test_every_device_names_check_ops_tables_that_exist_or_what_checks_it_instead() -> None:
    from edgepipe.deploy.check_ops.tables import tables

    for device in devices().values():
        assert device.ops_targets, device.name
        assert set(device.ops_targets) <= set(tables()), device.name
    hailo = devices_named("hailo")
    assert [d.name for d in hailo] == ["raspberry-pi-5-hailo-8l", "raspberry-pi-5-hailo-8"]
    assert all("Hailo's Dataflow Compiler" in d.ops_note and d.ops_targets == ("cpu",) for d in hailo)
    assert devices_named("Hailo_8L") == hailo[:1]
    assert [d.ops_targets[0] for d in devices_named("rk3588")] == ["rknn"]
