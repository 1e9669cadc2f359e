from __future__ import annotations

import gc
import resource
from pathlib import Path

import pytest

from edgepipe.lm import DecoderRunner, LanguageModel, SamplingParams
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryBudgetError, MemoryPlan


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e6


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["concat", "gqa"])
def test_resident_memory_does_not_grow_over_200_requests(tiny_models: dict[str, Path], layout: str) -> None:
    lm = LanguageModel(tiny_models[layout])
    prompt = lm.encode("The camera at the gate saw")
    for seed in range(20):  # warm up: allocators and caches settle
        list(
            lm.tokens(prompt, SamplingParams(max_new_tokens=24, temperature=0.8, seed=seed, ignore_eos=True))
        )
    before = rss_mb()
    for seed in range(200):
        out = list(
            lm.tokens(prompt, SamplingParams(max_new_tokens=24, temperature=0.8, seed=seed, ignore_eos=True))
        )
        assert len(out) == 24
    assert rss_mb() - before < 2.0, f"{rss_mb() - before:.2f} MB more after 200 requests"


def test_the_kv_cache_is_in_the_memory_plan_while_it_exists(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = MemoryPlan(limit_bytes=1 << 30)
    monkeypatch.setattr(memory, "_PLAN", plan)
    runner = DecoderRunner(tiny_models["concat"], owner="describe")
    weights, entry = plan.entries()  # the weights, reserved as the model loads, then the cache
    assert (weights.owner, weights.what) == ("describe", "model weights (model.onnx)")
    assert (entry.owner, entry.what) == ("describe", "KV cache (concat, 64 positions)")
    allocated = runner.cache._arena.shape()[0] * 4  # both concat buffers: the plan is what is allocated
    assert entry.nbytes == runner.cache.nbytes == allocated
    del runner
    gc.collect()
    assert plan.entries() == []


def test_a_kv_cache_past_the_budget_is_refused_before_it_is_allocated(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = (tiny_models["gqa"] / "model.onnx").stat().st_size
    budget = weights + 20_000  # the weights fit, a 64-position cache does not
    monkeypatch.setattr(memory, "_PLAN", MemoryPlan(budget_frac=0.5, limit_bytes=2 * budget))
    with pytest.raises(
        MemoryBudgetError, match=r"gqa: KV cache \(shared, 64 positions\) needs .*max_seq_len"
    ):
        DecoderRunner(tiny_models["gqa"])
