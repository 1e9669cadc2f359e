"""scripts/bench/headroom/summary.py: the governed runs put together against the bare costs, and the
targets, on made-up figures."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scripts.bench.headroom.bench import TARGETS
from scripts.bench.headroom.summary import BareCosts, capacity, governed_summary, judge, spread, useful_cpu

BARE = BareCosts(
    decode_cpu_s=0.003, model_cpu_s=0.05, model_wall_ms=45.0, tracker_update_cpu_s=2e-5,
    tracker_predict_cpu_s=5e-6, write_cpu_s=1e-5, token_cpu_s=0.002, prompt_token_cpu_s=0.0002,
)  # fmt: skip


def _run(detections: float = 16.5, *, cpu_s: float = 1.38, tokens: float = 10.0, cv: float = 0.03,
         cameras: int = 4, **extra: Any) -> dict[str, Any]:  # fmt: skip
    streams = [{"source": f"cam{i}", "detections_per_s": detections / cameras, "latency_p95_first_ms": 100.0,
                "latency_p95_last_ms": 120.0, "rate_cv": cv} for i in range(cameras)]  # fmt: skip
    return {
        "label": "g", "cpu_mean": 0.68, "cpu_p95": 0.72, "cpu_s_per_s": cpu_s, "detections_per_s": detections,
        "carries_per_s": 20.0, "frames_decoded_per_s": 120.0, "results_per_s": 30.0, "tokens_per_s": tokens,
        "prompt_tokens_per_s": 30.0, "infer_ms_mean": 55.0, "streams": streams,
        "rate_cv": {s["source"]: cv for s in streams}, "others_cpu_mean": 0.01, "rss_start_mb": 400.0,
        "rss_end_mb": 410.0, **extra,
    }  # fmt: skip


def test_the_counted_work_at_bare_costs_over_the_process_cpu() -> None:
    parts = useful_cpu(_run(10.0, cpu_s=1.4, tokens=20.0, carries_per_s=0.0, results_per_s=60.0,
                            prompt_tokens_per_s=60.0), BARE)  # fmt: skip
    # decode 120 x 3 ms; model 10 x 50 ms; tracker 10 updates; 60 lines; LM 20 tokens + 60 prompt tokens
    assert parts == {"decode": 0.36, "model": 0.5, "tracker": 0.0002, "writing": 0.0006, "lm": 0.052,
                     "total": 0.9128, "fraction": 0.652}  # fmt: skip
    carried = useful_cpu(_run(10.0, carries_per_s=100.0), BARE)
    assert carried["tracker"] == pytest.approx(10 * 2e-5 + 100 * 5e-6)
    assert useful_cpu(_run(cpu_s=0.0), BARE)["fraction"] is None  # no CPU measured


def test_capacity_is_the_budget_after_decode_and_the_lm_over_a_bare_model_run() -> None:
    # (0.7 x 2 - 120 x 3 ms - (10 x 2 ms + 30 x 0.2 ms)) / 50 ms
    assert capacity(_run(), BARE, target=0.7, cores=2) == pytest.approx((1.4 - 0.36 - 0.026) / 0.05, abs=0.01)
    assert capacity(_run(frames_decoded_per_s=600.0), BARE, target=0.7, cores=2) == 0.0  # decode takes it all
    assert capacity(_run(), BareCosts(*([0.0] * 8)), target=0.7, cores=2) is None


def test_spread_is_the_range_over_the_median() -> None:
    assert spread([9.0, 10.0, 11.0]) == 0.2
    assert spread([10.0]) == 0.0
    assert spread([]) is None
    assert spread([0.0, 0.0, 1.0]) is None


def test_the_governed_figures_are_medians_over_the_runs() -> None:
    runs = [_run(16.0, cv=0.02), _run(17.0, cv=0.04, infer_ms_mean=90.0), _run(16.5, cv=0.03)]
    runs[0]["rate_cv"]["cam3"] = 0.5
    out = governed_summary(runs, BARE, target=0.7, cores=2)
    assert out["detections_per_s_median"] == 16.5
    assert out["detections_per_s_spread"] == round(1.0 / 16.5, 3)
    assert out["capacity_detections_per_s"] == pytest.approx(20.28)
    assert out["model_wall_over_bare"] == round(55 / 45, 3)  # the median run; one ran at 2x
    assert out["rate_cv"] == {"cam0": 0.03, "cam1": 0.03, "cam2": 0.03, "cam3": 0.04}
    assert [r["model_wall_over_bare"] for r in out["runs"]] == [1.222, 2.0, 1.222]
    assert out["useful_fraction"] == out["runs"][2]["useful"]["fraction"]
    assert out["runs"][0]["label"] == "g"  # each run's own figures stay
    assert governed_summary([], BARE, target=0.7, cores=2)["detections_per_s_median"] is None


def test_every_target_is_judged_and_a_miss_fails_it() -> None:
    runs = [_run(16.0), _run(17.0), _run(16.5)]
    ungoverned = _run(12.0)
    verdicts = judge(governed_summary(runs, BARE, target=0.7, cores=2), ungoverned, TARGETS)
    assert [name for name, (met, _) in verdicts.items() if not met] == []
    assert len(verdicts) == 15
    assert verdicts["detections_per_s_median >= 0.8 x capacity"][1] == "16.5 / 20.28 = 0.81"

    bad = copy.deepcopy(runs)
    bad[1]["cpu_mean"] = 0.6  # one run left budget unused
    bad[2] = _run(
        16.5, cameras=3, cv=0.2, others_cpu_mean=0.08
    )  # a camera gone, the rate jumpy, a noisy machine
    bad[1]["rate_cv"]["cam0"] = 0.06  # with run 3's, the median of cam0's rate_cv is over
    bad[0]["tokens_per_s"] = 4.0
    bad[0]["rss_end_mb"] = 430.0
    bad[0]["streams"][1]["latency_p95_last_ms"] = 171.0
    failed = {
        name for name, (met, _) in judge(governed_summary(bad, BARE, target=0.7, cores=2), _run(15.0), TARGETS).items()
        if not met
    }  # fmt: skip
    assert failed == {
        "cpu_mean >= 0.64 (each of 3 governed runs)",
        "detections_per_s >= 2 on each of 4 cameras (each of 3 governed runs)",
        "slowest stream >= 0.8 x the fastest (each of 3 governed runs)",
        "latency_p95_last <= 1.2 x first + 50 ms (each of 3 governed runs)",
        "tokens_per_s >= 5 (each of 3 governed runs)",
        "RSS growth < 5% (each of 3 governed runs)",
        "detections_per_s_median >= 1.2 x ungoverned",
        "rate_cv <= 0.05 on each of 4 streams",
        "others_cpu_mean <= 0.05 in every run and the bare loops",
    }
    quiet = judge(governed_summary(runs, BARE, target=0.7, cores=2), ungoverned, TARGETS, bare_others=0.2)
    assert quiet["others_cpu_mean <= 0.05 in every run and the bare loops"] == (False, "worst 0.2")
    # Without an ungoverned run or a measured figure, the target is missed, not passed.
    empty = governed_summary([_run(infer_ms_mean=None, cpu_s_per_s=None)], BARE, target=0.7, cores=2)
    verdicts = judge(empty, None, TARGETS)
    assert not verdicts["detections_per_s_median >= 1.2 x ungoverned"][0]
    assert not verdicts["model_wall_over_bare <= 1.3"][0]
    assert not verdicts["useful_fraction >= 0.85"][0]
