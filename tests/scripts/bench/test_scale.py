"""The pure parts of scripts/bench/scale.py on made-up data: no subprocess, no model."""

from __future__ import annotations

import pytest

from scripts.bench.headroom.figures import Output, Records, Sample
from scripts.bench.scale import COST, count_figures, judge, medians, model_seconds

T0 = 1_800_000_000.0


def beat(t: float, model_s: float) -> dict[str, object]:
    return {
        "t": t,
        "sched": {"cpu_ledger": {"nodes": {"faces": {"kinds_s": {"pre": 1.0, "model": model_s}}}}},
    }


def test_the_model_calls_cpu_comes_from_the_heartbeats_ledger() -> None:
    assert model_seconds(beat(T0, 12.5)) == 12.5
    assert model_seconds({"t": T0, "sched": None}) is None, "ungoverned: no ledger"
    assert model_seconds({"t": T0, "sched": {"cpu_ledger": {"nodes": {}}}}) is None


def two_cameras(seconds: int) -> Records:
    """Two 30 fps cameras, every frame a result, one in ten the model's."""
    records = Records()
    for i in range(seconds * 30):
        for cam in ("cam0", "cam1"):
            t = T0 + i / 30
            records.outputs.append(Output(t, cam, 40.0 + (i % 10), i % 10 == 0, seq=i))
            records.written.append(t)
    return records


def test_a_count_is_figured_over_the_measured_span() -> None:
    records = two_cameras(20)
    samples = [Sample(T0 + s, cpu_s=0.6 * 2 * s, rss_mb=100.0) for s in range(21)]  # 0.6 of 2 cores
    # The ledger: 0.1 CPU-s a model run, 6 runs a second (3 per camera).
    beats = [(T0 + s, 0.6 * s) for s in range(0, 21, 5)]
    run = count_figures(samples, records, beats, cameras=2, cores=2.0, target=0.7, warmup_s=5, seconds=20)
    assert run["results_per_camera_per_s"] == pytest.approx(30.0, rel=0.02)
    assert run["results_share_worst"] == pytest.approx(1.0, rel=0.02)
    assert run["model_runs_per_s"] == pytest.approx(6.0, rel=0.05)
    assert run["model_cpu_s_per_run"] == pytest.approx(0.1, rel=0.05)
    assert run["cpu_s_per_result"] == pytest.approx(1.2 / 60, rel=0.05)
    assert run["cpu_s_per_model_run"] == pytest.approx(1.2 / 6, rel=0.05)
    assert run["latency_p95_worst_ms"] == pytest.approx(49.0, abs=0.5)
    assert run["rate_cv_median"] is not None


def test_medians_and_targets() -> None:
    runs = [{"cameras": 8, "model_cpu_s_per_run": v, "results_share_worst": s} for v, s in
            ((0.16, 0.95), (0.17, 0.99), (0.20, 0.80))]  # fmt: skip
    eight = medians(runs)
    assert (eight["runs"], eight["model_cpu_s_per_run"], eight["results_share_worst"]) == (3, 0.17, 0.95)
    one = {"cameras": 1, "model_cpu_s_per_run": 0.16, "results_share_worst": 0.25}
    verdicts = judge({1: one, 8: eight})
    assert verdicts[COST] == (True, round(0.17 / 0.16, 3))
    assert all(met for met, _ in verdicts.values())
    assert not judge({1: one, 8: {**eight, "model_cpu_s_per_run": 0.2}})[COST][0], "25% dearer at 8"
    assert judge({8: eight})[COST] == (False, None), "no figure at 1 camera: not met"
