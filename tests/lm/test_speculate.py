from __future__ import annotations

import numpy as np

from edgepipe.lm.sampling import Sampler, SamplingParams
from edgepipe.lm.speculate import PromptLookup, Speculation


def test_drafts_are_what_followed_the_longest_recent_match() -> None:
    seq = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    lookup = PromptLookup(seq)
    assert lookup.draft(2) == [7, 8]  # "2 3" last came before 7 8 (the latest match wins)
    seq += [7]
    assert lookup.draft(3) == [8, 5, 2]  # "2 3 7" matched, three tokens long
    assert PromptLookup([4, 5, 6]).draft(3) == []  # nothing seen twice: no draft
    assert lookup.draft(0) == []


def test_a_request_whose_drafts_miss_stops_drafting_for_a_while() -> None:
    lookup = PromptLookup([1, 2, 1])
    lookup.verified(3, 0)
    assert lookup.pause == 0  # one miss is not a pattern
    lookup.verified(3, 0)
    assert lookup.pause == 8
    lookup.verified(3, 1)
    assert lookup.misses == 0


def test_speculation_backs_off_when_verify_steps_do_not_pay() -> None:
    spec = Speculation(max_drafts=4)
    for _ in range(3):
        spec.record(0.010, 0, 0, 1)  # plain steps: 10 ms a token
    for _ in range(4):
        assert spec.allowed() == 4
        spec.record(0.014, 4, 0, 1)  # verify steps: 14 ms for 1 token
    assert spec.allowed() == 0
    assert spec.pause == 7
    paying = Speculation(max_drafts=4)
    paying.record(0.010, 0, 0, 1)
    for _ in range(8):
        paying.record(0.013, 4, 2, 1)  # 3 tokens for 1.3 steps' time
    assert paying.allowed() == 4
    assert paying.accepted_per_step == 2.0
    assert Speculation(max_drafts=0).allowed() == 0


def test_sampled_verification_keeps_the_distribution_it_samples_from() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.2], np.float32))
    params = SamplingParams(temperature=1.0, seed=3)
    sampler = Sampler(3)
    sampler.start(params, [])
    draws = 20000
    counts = np.zeros(3)
    kept = 0
    for _ in range(draws):
        token, accepted = sampler.verify(logits, 1)  # the draft is always token 1
        counts[token] += 1
        kept += accepted
    np.testing.assert_allclose(counts / draws, [0.5, 0.3, 0.2], atol=0.015)
    assert abs(kept / draws - 0.3) < 0.015  # a draft is kept with its probability
    greedy = Sampler(3)
    greedy.start(SamplingParams(), [])
    assert greedy.verify(logits, 0) == (0, True)
    assert greedy.verify(logits, 2) == (0, False)
