from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from edgepipe import Input, Pipeline
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryPlan, memory_plan
from edgepipe.runtime.memory_plan import PlanNode, plan_graph
from edgepipe.testing import ListSink


class Camera:
    """A source that says what its pool would take, from its consumers' holds."""

    def __init__(self, frame_bytes: int = 100, size: tuple[int, int] = (64, 48)) -> None:
        self.frame_bytes = frame_bytes
        self.size = size
        self.seen: PlanNode | None = None

    async def __aiter__(self) -> AsyncIterator[int]:
        yield 1

    def plan_memory(self, plan: MemoryPlan, node: PlanNode) -> tuple[int, int]:
        self.seen = node
        frames = sum(node.consumer_holds) + 1
        plan.reserve(node.node_id, f"frame pool ({frames} frames)", frames * self.frame_bytes)
        return self.size


class Model:
    """A stage with weights and buffers sized by what its input says it produces."""

    def __init__(self, weights: int = 1000, device: str = "") -> None:
        self.weights = weights
        self.device = device
        self.seen: PlanNode | None = None

    def process(self, item: Any) -> Any:
        return item

    def prepare(self, item: Any) -> Any:  # prepares the next item while one runs: holds two
        return item

    def plan_memory(self, plan: MemoryPlan, node: PlanNode) -> None:
        self.seen = node
        plan.reserve(node.node_id, "weights", self.weights, device=self.device)
        for lane, size in node.inputs.items():
            if size is None:
                node.unknown(f"tensors for {lane}", "its input says no size")
            else:
                plan.reserve(node.node_id, f"tensors for {lane}", size[0] * size[1])


class Broken:
    def process(self, item: Any) -> Any:
        return item

    def plan_memory(self, plan: MemoryPlan, node: PlanNode) -> None:
        raise FileNotFoundError("model.onnx is not there")


def test_each_hook_gets_the_runtimes_holds_and_what_its_inputs_produce() -> None:
    camera, model = Camera(), Model()
    p = Pipeline("t")
    cam = p.source("camera", camera)
    p.sink("log", ListSink(), inputs=cam, queue_size=4)  # 4 in the lane + 1 in hand
    det = p.stage("det", model, inputs=cam, policy="latest", queue_size=1)  # 1 + 3 (a call in flight)
    p.sink("out", ListSink(), inputs=det)
    report = plan_graph(p.validate(), MemoryPlan(limit_bytes=1 << 30, refuse=False))
    assert camera.seen is not None
    assert sorted(camera.seen.consumer_holds) == [4, 5]
    assert model.seen is not None
    assert dict(model.seen.inputs) == {"camera": (64, 48)}
    assert [(r.owner, r.what, r.nbytes) for r in report.entries] == [
        ("camera", "frame pool (10 frames)", 1000),  # in topological order, as reserved
        ("det", "weights", 1000),
        ("det", "tensors for camera", 64 * 48),
    ]
    assert report.nodes == ("camera", "log", "det", "out")
    assert report.host_bytes == 1000 + 1000 + 64 * 48
    assert report.fits
    assert report.crossing is None
    assert report.refusal is None
    assert report.unknowns == ()
    assert report.failures == ()


def test_the_first_buffer_past_the_budget_is_named_and_the_rest_still_counted() -> None:
    p = Pipeline("t")
    cam = p.source("camera", Camera(frame_bytes=100))
    big = p.stage("lm", Model(weights=5000), inputs=cam, queue_size=1)  # holds 4: a pool of 5
    p.sink("out", ListSink(), inputs=big)
    report = plan_graph(p.validate(), MemoryPlan(budget_frac=0.5, limit_bytes=10_000, refuse=False))
    assert not report.fits
    assert report.crossing is not None
    assert (report.crossing.owner, report.crossing.what) == ("lm", "weights")
    assert [r.what for r in report.entries] == ["frame pool (5 frames)", "weights", "tensors for camera"]
    assert report.refusal is not None
    assert str(report.refusal).startswith("lm: weights needs 0.0 MB, and the memory plan already holds")
    assert report.budget_bytes == 5000


def test_device_buffers_are_listed_outside_the_budget() -> None:
    p = Pipeline("t")
    cam = p.source("camera", Camera(frame_bytes=100))
    p.sink("det", Model(weights=10**9, device="cuda:0"), inputs=cam, queue_size=1)
    report = plan_graph(p.validate(), MemoryPlan(limit_bytes=10_000, refuse=False))
    assert report.fits
    assert report.device_bytes() == {"cuda:0": 10**9}
    assert report.host_bytes == 500 + 64 * 48


def test_unknown_sizes_and_failing_hooks_are_reported_and_the_rest_planned() -> None:
    p = Pipeline("t")
    src = p.source("numbers", [1, 2, 3])  # no hook: says nothing, produces nothing known
    a = p.stage("model", Model(), inputs=src)
    b = p.stage("broken", Broken(), inputs=src)
    p.sink("out", ListSink(), inputs={"a": Input(a), "b": Input(b)})
    report = plan_graph(p.validate(), MemoryPlan(limit_bytes=1 << 30, refuse=False))
    assert [(r.owner, r.what) for r in report.entries] == [("model", "weights")]
    assert [(u.owner, u.what, u.why) for u in report.unknowns] == [
        ("model", "tensors for numbers", "its input says no size")
    ]
    assert report.failures == (("broken", "FileNotFoundError: model.onnx is not there"),)
    assert report.fits


def test_the_plan_is_a_fresh_one_with_the_budget_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory, "_PLAN", MemoryPlan(limit_bytes=1 << 30))
    monkeypatch.setenv("EDGEPIPE_MEMORY_FRAC", "0.25")
    p = Pipeline("t")
    p.sink("out", ListSink(), inputs=p.source("camera", Camera()), queue_size=1)
    report = plan_graph(p.validate())
    assert report.budget_frac == 0.25
    assert report.limit_bytes == memory.memory_limit_bytes()
    assert [r.what for r in report.entries] == ["frame pool (3 frames)"]  # one in the lane, one in hand
    assert memory_plan().entries() == []  # nothing reserved in the process's own plan
