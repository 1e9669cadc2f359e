from __future__ import annotations

import gc
import logging
import re
from pathlib import Path

import pytest

from edgepipe import Pipeline
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryBudgetError, MemoryPlan, memory_limit_bytes, memory_plan
from edgepipe.runner import RunConfig
from edgepipe.testing import FakeSource, ListSink, run_pipeline


class Holder:
    pass


def test_reservations_add_up_and_end_with_release_or_their_holder() -> None:
    plan = MemoryPlan(budget_frac=0.5, limit_bytes=1000)
    assert plan.budget_bytes == 500
    a = plan.reserve("det", "tensors", 100)
    holder = Holder()
    plan.reserve("lm", "KV cache", 300, holder=holder)
    assert plan.total_bytes == 400
    assert [r.what for r in plan.entries()] == ["KV cache", "tensors"]  # largest first
    assert (
        plan.summary() == "memory plan: 0.0 MB of a 0.0 MB budget: 0.0 MB KV cache (lm); 0.0 MB tensors (det)"
    )
    del holder
    gc.collect()
    assert plan.total_bytes == 100
    a.release()
    a.release()
    assert plan.total_bytes == 0


def test_a_run_s_plan_lists_its_own_and_the_process_s_holds_and_refuses_every_run_s() -> None:
    process = MemoryPlan(budget_frac=0.5, limit_bytes=1000)
    one, two = MemoryPlan.for_run(process), MemoryPlan.for_run(process)
    assert one.budget_bytes == 500  # the same memory: the process's budget
    a = one.reserve("det", "tensors", 200)
    holder = Holder()
    two.reserve("lm", "KV cache", 250, holder=holder)
    assert [r.what for r in one.entries()] == ["tensors"]
    assert [r.what for r in two.entries()] == ["KV cache"]
    assert process.total_bytes == 450
    with pytest.raises(MemoryBudgetError, match="more tensors"):  # 200 + 100 alone would fit in 500
        one.reserve("det", "more tensors", 100)
    assert one.total_bytes == 200
    assert process.total_bytes == 450
    assert one.as_data() == {
        "total_bytes": 200,
        "budget_bytes": 500,
        "reservations": [{"owner": "det", "what": "tensors", "nbytes": 200, "device": ""}],
    }
    a.release()
    del holder
    gc.collect()
    assert (one.total_bytes, two.total_bytes, process.total_bytes) == (0, 0, 0)


def test_a_reservation_past_the_budget_is_refused_by_name() -> None:
    plan = MemoryPlan(budget_frac=0.7, limit_bytes=1_000_000_000)
    plan.reserve("camera", "frame pool (5 x 1920x1080)", 600_000_000)
    with pytest.raises(MemoryBudgetError) as caught:
        plan.reserve(
            "describe", "KV cache (gqa, 4096 positions)", 200_000_000, hint="pass a smaller max_seq_len"
        )
    message = str(caught.value)
    assert message.startswith("describe: KV cache (gqa, 4096 positions) needs 200.0 MB")
    assert (
        "already holds 600.0 MB (600.0 MB frame pool (5 x 1920x1080) (camera)) of its 700.0 MB budget"
        in message
    )
    assert (
        "70% of the 1.00 GB this process may use); pass a smaller max_seq_len, or raise EDGEPIPE_MEMORY_FRAC"
        in message
    )
    assert isinstance(caught.value, MemoryError)
    assert plan.total_bytes == 600_000_000  # nothing half-reserved


def test_the_budget_fraction_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEPIPE_MEMORY_FRAC", "0.5")
    assert MemoryPlan(limit_bytes=100).budget_bytes == 50
    for bad in ("half", "0", "1.5"):
        monkeypatch.setenv("EDGEPIPE_MEMORY_FRAC", bad)
        with pytest.raises(ValueError, match="EDGEPIPE_MEMORY_FRAC"):
            MemoryPlan()


def test_the_limit_is_the_machines_memory_or_less() -> None:
    limit = memory_limit_bytes()
    assert limit is not None
    with open("/proc/meminfo") as f:
        total_kb = int(f.readline().split()[1])
    assert 0 < limit <= total_kb * 1024


class Reserving:
    """A stage that holds a buffer for the whole run, as a model's cache does."""

    async def start(self) -> None:
        self.reservation = memory_plan().reserve("hold", "scratch (test)", 12_345_678)

    def stop(self) -> None:
        self.reservation.release()

    def process(self, item: int) -> int:
        if item == 1:  # sized by the first input, as a detector's tensors are
            self.late = memory_plan().reserve("hold", "tensors (test)", 2_000_000, holder=self)
        return item


def test_the_runtime_logs_the_plan_once_everything_started(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "_PLAN", MemoryPlan(limit_bytes=1 << 30))
    p = Pipeline("t")
    p.sink("out", ListSink(), inputs=p.stage("hold", Reserving(), inputs=p.source("src", FakeSource([1, 2]))))
    with caplog.at_level(logging.INFO, logger="edgepipe.planning.memory"):
        run_pipeline(p, RunConfig(governed=False))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory plan")]
    assert lines == [
        "memory plan: 12.3 MB of a 751.6 MB budget: 12.3 MB scratch (test) (hold)",
        "memory plan: + 2.0 MB tensors (test) (hold); 14.3 MB in all",
    ]
    assert memory_plan().total_bytes == 2_000_000  # the scratch is released at stop, the tensors live on


def test_a_cgroup_limit_set_on_the_group_or_a_parent_counts(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/camera.service\n")
    service = tmp_path / "sys" / "system.slice" / "camera.service"
    service.mkdir(parents=True)
    (service / "memory.max").write_text("max\n")
    (service.parent / "memory.max").write_text("536870912\n")
    assert memory._cgroup_limits(proc, tmp_path / "sys") == [536870912]
    proc.write_text("4:memory:/docker/abc\n1:cpu:/\n")
    v1 = tmp_path / "sys" / "memory" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(2**63 - 4096))  # v1's "unlimited"
    (v1.parent.parent / "memory.limit_in_bytes").write_text("1073741824")
    assert memory._cgroup_limits(proc, tmp_path / "sys") == [1073741824]
    assert memory._cgroup_limits(tmp_path / "missing", tmp_path) == []


def test_a_release_from_a_finalizer_inside_a_locked_section_does_not_deadlock() -> None:
    plan = MemoryPlan(limit_bytes=1 << 30)
    holder = Holder()
    plan.reserve("a", "x", 10, holder=holder)
    with plan._lock:  # a garbage collection that runs the finalizer while the plan is locked
        del holder
        gc.collect()
    assert plan.total_bytes == 0
    with pytest.raises(TypeError):  # a holder that cannot be weakly referenced: nothing reserved
        plan.reserve("a", "x", 10, holder=1)
    assert plan.entries() == []


def test_a_dry_run_records_everything_and_keeps_the_first_refusal() -> None:
    plan = MemoryPlan(budget_frac=0.5, limit_bytes=1000, refuse=False)
    plan.reserve("camera", "frame pool", 400)
    plan.reserve("lm", "KV cache", 300, hint="pass a smaller max_seq_len")  # past the 500 budget
    plan.reserve("det", "tensors", 200)  # past it too: recorded, not the first refusal
    assert plan.total_bytes == 900
    assert plan.first_refusal is not None
    assert str(plan.first_refusal).startswith("lm: KV cache needs 0.0 MB, and the memory plan already holds")
    assert "pass a smaller max_seq_len, or raise EDGEPIPE_MEMORY_FRAC" in str(plan.first_refusal)
    assert plan.first_refusal.owner == "lm"
    assert MemoryPlan(limit_bytes=1000).first_refusal is None


def test_a_buffer_on_a_device_is_named_but_outside_the_host_budget(caplog: pytest.LogCaptureFixture) -> None:
    plan = MemoryPlan(budget_frac=0.5, limit_bytes=1_000_000_000)
    plan.reserve("camera", "frame pool", 400_000_000)
    plan.reserve("describe", "KV cache", 2_000_000_000, device="cuda:0")  # never refused by the host budget
    assert plan.total_bytes == 400_000_000
    assert plan.summary() == (
        "memory plan: 400.0 MB of a 500.0 MB budget: 2.00 GB KV cache (describe, on cuda:0); "
        "400.0 MB frame pool (camera)"
    )
    with pytest.raises(
        MemoryBudgetError, match=re.escape("already holds 400.0 MB (400.0 MB frame pool (camera))")
    ):
        plan.reserve("faces", "tensors", 200_000_000)
    plan.announced = True
    with caplog.at_level(logging.INFO, logger="edgepipe.planning.memory"):
        plan.reserve("faces", "weights", 1_000_000, device="cuda:0")
    assert caplog.messages == ["memory plan: + 1.0 MB weights (faces, on cuda:0); 400.0 MB in all"]
