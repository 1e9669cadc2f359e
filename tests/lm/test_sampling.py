from __future__ import annotations

import numpy as np
import pytest

from edgepipe.lm.sampling import Sampler, SamplingParams

LOGITS = np.log(np.array([0.5, 0.3, 0.15, 0.05], np.float32))


def draws(params: SamplingParams, count: int = 4000, prompt: list[int] | None = None) -> np.ndarray:
    sampler = Sampler(4)
    sampler.start(params, prompt or [])
    return np.bincount([sampler.pick(LOGITS) for _ in range(count)], minlength=4) / count


def test_greedy_takes_the_most_likely_and_leaves_the_logits_alone() -> None:
    logits = LOGITS.copy()
    sampler = Sampler(4)
    sampler.start(SamplingParams(), [])
    assert sampler.pick(logits) == 0
    np.testing.assert_array_equal(logits, LOGITS)


def test_temperature_one_follows_the_distribution() -> None:
    np.testing.assert_allclose(
        draws(SamplingParams(temperature=1.0, seed=1)), [0.5, 0.3, 0.15, 0.05], atol=0.03
    )


def test_top_k_and_top_p_cut_the_tail() -> None:
    assert draws(SamplingParams(temperature=1.0, top_k=2, seed=1))[2:].sum() == 0
    only_two = draws(SamplingParams(temperature=1.0, top_p=0.7, seed=1))  # 0.5 + 0.3 reach 0.7
    assert only_two[2:].sum() == 0
    np.testing.assert_allclose(only_two[:2], [0.625, 0.375], atol=0.03)


def test_low_temperature_sharpens() -> None:
    assert draws(SamplingParams(temperature=0.2, seed=1))[0] > 0.9


def test_repetition_penalty_makes_seen_tokens_less_likely() -> None:
    sampler = Sampler(4)
    sampler.start(SamplingParams(repetition_penalty=10.0), [0])
    assert sampler.pick(np.array([2.0, 1.0, 0.5, 0.1], np.float32)) == 1  # 2.0 / 10 < 1.0


def test_the_same_seed_gives_the_same_draws() -> None:
    a = Sampler(4)
    b = Sampler(4)
    for sampler in (a, b):
        sampler.start(SamplingParams(temperature=1.0, seed=42), [])
    assert [a.pick(LOGITS) for _ in range(50)] == [b.pick(LOGITS) for _ in range(50)]


def test_nonsense_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)


def test_top_k_keeps_exactly_k_even_with_ties() -> None:
    sampler = Sampler(4)
    sampler.start(SamplingParams(temperature=1.0, top_k=2, seed=0), [])
    tied = np.array([1.0, 1.0, 1.0, -5.0], np.float32)
    assert len({sampler.pick(tied) for _ in range(300)}) <= 2


def test_top_p_over_candidates_matches_a_full_sort() -> None:
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(5000).astype(np.float32) * 3
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    order = np.argsort(-probs)
    allowed = set(order[: int(np.searchsorted(np.cumsum(probs[order]), 0.9)) + 1].tolist())
    sampler = Sampler(5000)
    sampler.start(SamplingParams(temperature=1.0, top_p=0.9, seed=1), [])
    drawn = {sampler.pick(logits) for _ in range(2000)}
    assert drawn <= allowed
    assert len(drawn) > len(allowed) // 4


def test_empty_stop_strings_are_refused() -> None:
    with pytest.raises(ValueError, match="empty string"):
        SamplingParams(stop_strings=("",))
