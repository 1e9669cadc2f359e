from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe.infer.errors import ModelNotFound
from edgepipe.infer.footprint import weights_bytes
from edgepipe.lm import DecoderLayoutError, DecoderRunner, Describe
from edgepipe.lm import reservations as lm_planning
from edgepipe.lm.reservations import plan_language_model
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.memory_plan import PlanNode
from tests.support.onnx_builders import add_model


def _entries(plan: MemoryPlan) -> list[tuple[str, str, int, str]]:
    return sorted((r.owner, r.what, r.nbytes, r.device) for r in plan.entries())


@pytest.mark.parametrize(
    ("layout", "max_seq_len", "slots"),
    [
        ("concat", None, 1),
        ("concat", 48, 1),
        ("gqa", None, 1),
        ("gqa", 32, 1),
        ("concat", 48, 4),
        ("gqa", 32, 4),
    ],
)
def test_the_plan_reserves_the_kv_cache_the_runner_reserves(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch, layout: str, max_seq_len: int | None,
    slots: int,
) -> None:  # fmt: skip
    model = tiny_models[layout]
    planned = MemoryPlan(limit_bytes=1 << 30)
    plan_language_model(
        planned, PlanNode("describe", (), {}), model=model, max_seq_len=max_seq_len, session=None, slots=slots
    )
    process_plan = MemoryPlan(limit_bytes=1 << 30)
    monkeypatch.setattr(memory, "_PLAN", process_plan)
    runner = DecoderRunner(model, max_seq_len=max_seq_len, owner="describe", slots=slots)
    ran = _entries(process_plan)
    kv = next(e for e in ran if "KV cache" in e[1])
    assert kv[2] == runner.cache.nbytes
    weights = ("describe", "model weights (model.onnx)", weights_bytes(model / "model.onnx"), "")
    assert weights in ran
    assert _entries(planned) == ran  # the plan is what the run reserves


def test_describe_plans_with_its_workers_settings(tiny_models: dict[str, Path]) -> None:
    plan = MemoryPlan(limit_bytes=1 << 30)
    Describe(tiny_models["concat"], max_seq_len=1000).plan_memory(plan, PlanNode("narrate", (), {}))
    assert [(r.owner, r.what) for r in plan.entries() if "KV" in r.what] == [
        ("narrate", "KV cache (concat, 1000 positions)")
    ]
    four = MemoryPlan(limit_bytes=1 << 30)
    Describe(tiny_models["gqa"], slots=4).plan_memory(four, PlanNode("narrate", (), {}))
    [_weights, cache] = four.entries()  # one model, one cache of four rows
    assert cache.what == "KV cache (shared, 4 slots x 64 positions)"
    assert cache.nbytes == 4 * DecoderRunner(tiny_models["gqa"]).cache.nbytes


def test_a_kv_cache_on_a_device_is_named_outside_the_budget(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lm_planning, "session_device", lambda config: ("cuda", 0))
    plan = MemoryPlan(limit_bytes=1 << 30)
    plan_language_model(
        plan, PlanNode("describe", (), {}), model=tiny_models["gqa"], max_seq_len=None, session=None
    )
    assert {r.device for r in plan.entries()} == {"cuda:0"}  # the weights too: the session puts them there
    assert plan.total_bytes == 0


def test_what_loading_would_refuse_the_plan_refuses(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    node = PlanNode("describe", (), {})
    with pytest.raises(DecoderLayoutError, match="longer than the model's cache buffer"):
        plan_language_model(MemoryPlan(), node, model=tiny_models["gqa"], max_seq_len=65, session=None)
    with pytest.raises(ModelNotFound, match="no such file"):
        plan_language_model(MemoryPlan(), node, model=tmp_path, max_seq_len=None, session=None)
    with pytest.raises(DecoderLayoutError, match="not a decoder with a KV cache"):
        plan_language_model(MemoryPlan(), node, model=add_model(tmp_path / "add.onnx"), max_seq_len=None,
                            session=None)  # fmt: skip
