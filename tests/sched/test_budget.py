"""The CPU budget: usable cores from affinity and the cgroup quota, times the target."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgepipe.sched.budget import Cores, CpuBudget, cgroup_quota, usable_cores


def cgroup_v2(root: Path, rel: str, levels: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    proc = root / "proc_cgroup"
    proc.write_text(f"0::{rel}\n")
    for path, value in levels.items():
        d = root / "fs" / path.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(value + "\n")
    return proc


def test_docker_cpus_2_is_honoured(tmp_path: Path) -> None:
    # docker run --cpus=2 writes "200000 100000" in the container's cgroup.
    proc = cgroup_v2(tmp_path, "/docker/abc", {"/": "max 100000", "/docker/abc": "200000 100000"})
    assert cgroup_quota(tmp_path / "fs", proc) == 2.0
    cores = usable_cores(tmp_path / "fs", proc)
    assert cores.usable == min(2.0, len(os.sched_getaffinity(0)))


def test_the_tightest_level_wins_and_unlimited_is_none(tmp_path: Path) -> None:
    proc = cgroup_v2(tmp_path, "/a/b", {"/a": "150000 100000", "/a/b": "max 100000"})
    assert cgroup_quota(tmp_path / "fs", proc) == 1.5
    proc = cgroup_v2(tmp_path / "u", "/", {"/": "max 100000"})
    assert cgroup_quota(tmp_path / "u" / "fs", proc) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    proc = tmp_path / "proc_cgroup"
    proc.write_text("4:memory:/x\n1:cpu,cpuacct:/x\n")
    d = tmp_path / "fs" / "cpu,cpuacct" / "x"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("50000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quota(tmp_path / "fs", proc) == 0.5


@pytest.mark.parametrize(
    ("cores", "target", "units"),
    [(2, 0.7, 1), (4, 0.7, 2), (8, 0.7, 5), (1, 0.7, 1), (8, 1.0, 8), (0.5, 0.7, 1)],
)
def test_units_and_threads_leave_the_headroom(cores: float, target: float, units: int) -> None:
    budget = CpuBudget(Cores(cores, max(1, int(cores)), None), target)
    assert budget.units == units == budget.threads
    assert budget.cores_budget == pytest.approx(cores * target)


def test_a_target_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="target"):
        CpuBudget(Cores(2, 2, None), 0.0)


def test_the_plan_says_what_limits_it() -> None:
    text = CpuBudget(Cores(2.0, 16, 2.0), 0.7).describe()
    assert "cgroup quota 2" in text
    assert "1.40" in text
    assert "1 heavy call unit" in text


def test_a_model_that_asks_for_latency_gets_the_spare_units_threads_where_there_are_some() -> None:
    two = Cores(2.0, 2, None)  # x 0.7 = 1.4: one unit, and one spare
    assert CpuBudget(two, video_streams=1, model_nodes=1).latency_threads == 2
    assert CpuBudget(two, video_streams=1, model_nodes=2).latency_threads == 1, "two models share"
    assert CpuBudget(two, video_streams=2, model_nodes=1).latency_threads == 1, "decoders fill the cores"
    assert CpuBudget(Cores(1.0, 1, None), video_streams=1, model_nodes=1).latency_threads == 1, "no spare"
    assert CpuBudget(Cores(4.0, 4, None), video_streams=1, model_nodes=1).latency_threads == 3  # 2.8
    one = CpuBudget(two, video_streams=1, model_nodes=1)
    assert one.threads == 1, "other models (and --plan) keep the units"


def test_auto_instances_are_the_units_the_gate_admits_at_once_and_one_ungoverned() -> None:
    two = Cores(2.0, 2, None)
    assert CpuBudget(two).instances == 2, "1.4: the main unit and the spare one"
    assert CpuBudget(Cores(8.0, 8, None)).instances == 6, "5.6: five main units and a spare"
    assert CpuBudget(Cores(1.0, 1, None)).instances == 1, "0.7: one unit, no spare"
    assert CpuBudget(two, governed=False).instances == 1, "no gate, no governor: one call"
    assert "2 calls in flight for a model node" in CpuBudget(two).describe()
    assert "calls in flight" not in CpuBudget(two, governed=False).describe()
