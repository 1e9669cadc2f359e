from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from edgepipe import Pipeline
from edgepipe.infer import SessionConfig
from edgepipe.infer.errors import ModelNotFound
from edgepipe.infer.footprint import weights_bytes
from edgepipe.infer.registry import REGISTRY
from edgepipe.media import FrameSize, VideoSource
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runner import RunConfig
from edgepipe.runtime.engine import Runtime
from edgepipe.runtime.memory_plan import PlanNode, plan_graph
from edgepipe.testing import ListSink, run_pipeline
from edgepipe.vision import Detector
from tests.support.onnx_builders import constant_detector


def _entries(plan: MemoryPlan) -> list[tuple[str, str, int]]:
    return sorted((r.owner, r.what, r.nbytes) for r in plan.entries())


def _pipeline(detector: Detector) -> Pipeline:
    p = Pipeline("t")
    camera = p.source("camera", VideoSource("synthetic://320x240@30"))
    faces = p.stage("faces", detector, inputs=camera, policy="latest", queue_size=1)
    p.sink("out", ListSink(), inputs=faces)
    return p


@pytest.mark.slow
def test_the_plan_has_the_running_detectors_buffers_and_its_weights(
    centerface: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dry_run = MemoryPlan(limit_bytes=1 << 30, refuse=False)
    planned = plan_graph(_pipeline(Detector("centerface")).validate(), dry_run)
    process_plan = MemoryPlan(limit_bytes=1 << 30)
    monkeypatch.setattr(memory, "_PLAN", process_plan)
    detector = Detector("centerface")
    ran: list[tuple[str, str, int]] = []

    async def while_it_runs(runtime: Runtime) -> None:
        for _ in range(3000):
            if detector.inferred:
                ran.extend(_entries(process_plan))
                return
            await asyncio.sleep(0.01)

    run_pipeline(_pipeline(detector), RunConfig(governed=False, duration_s=1.0, watchers=[while_it_runs]))
    assert detector.inferred > 0
    assert [e for e in _entries(process_plan) if e[0] == "faces"] == []  # given back at stop
    assert ("faces", "input tensors (3 x 320x256 float32)", 3 * 3 * 320 * 256 * 4) in ran
    assert ("faces", "model weights (centerface.onnx)", weights_bytes(centerface)) in ran
    assert _entries(dry_run) == ran  # the plan is what the run reserves
    assert planned.unknowns == ()


def test_a_registry_model_not_fetched_yet_counts_at_the_registrys_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(tmp_path))  # an empty cache
    plan = MemoryPlan(limit_bytes=1 << 30)
    node = PlanNode("faces", (2,), {"camera": FrameSize(640, 480)})
    Detector("centerface").plan_memory(plan, node)
    assert _entries(plan) == [
        ("faces", "model weights (centerface.onnx, not fetched yet: the run fetches it)",
         REGISTRY["centerface"].size_bytes)
    ]  # fmt: skip
    [unknown] = node.unknowns
    assert unknown.what == "input tensors"
    assert "edgepipe models pull centerface" in unknown.why
    assert not list(tmp_path.iterdir())  # nothing fetched


def test_a_fixed_size_model_needs_no_frame_size_and_a_batch_takes_more_tensors(tmp_path: Path) -> None:
    model = constant_detector(tmp_path / "fixed.onnx", {"boxes": np.zeros((1, 0, 4))}, size=320)
    plan = MemoryPlan(limit_bytes=1 << 30)
    node = PlanNode("det", (2,), {"camera": None})
    Detector(str(model), batch_size=4).plan_memory(plan, node)
    assert ("det", "input tensors (5 x 320x320 float32)", 5 * 3 * 320 * 320 * 4) in _entries(plan)
    assert node.unknowns == []


def test_a_model_that_takes_any_size_without_a_frame_size_is_unknown(centerface: Path) -> None:
    plan = MemoryPlan(limit_bytes=1 << 30)
    node = PlanNode("faces", (2,), {"camera": None})
    Detector(str(centerface), session=SessionConfig(free_image_dims=True)).plan_memory(plan, node)
    assert [what for _, what, _ in _entries(plan)] == ["model weights (centerface.onnx)"]
    assert [u.what for u in node.unknowns] == ["input tensors"]


def test_a_missing_model_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="no such file"):
        Detector(str(tmp_path / "gone.onnx")).plan_memory(MemoryPlan(), PlanNode("det", (), {}))
