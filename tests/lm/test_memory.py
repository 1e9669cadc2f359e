from __future__ import annotations

import resource
from pathlib import Path

import pytest

from edgepipe.lm import LanguageModel, SamplingParams


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
