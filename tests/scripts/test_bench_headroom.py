"""The pure parts of scripts/bench_headroom.py on made-up data: no subprocess, no model."""

from __future__ import annotations

import json

import pytest
from bench_headroom import TARGETS, headroom_target, supported
from headroom_figures import (
    Detected,
    Records,
    Sample,
    cpu_fractions,
    figures,
    judge,
    others_fraction,
    parse_dropped,
    parse_results,
    percentile,
    ratio,
    stream_figures,
)

T0 = 1_800_000_000.0


def test_percentile_interpolates_as_numpy_does() -> None:
    assert percentile([], 95) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(101))), 95) == pytest.approx(95.0)
    assert percentile([10.0, 0.0], 100) == 10.0


def test_cpu_windows_are_fractions_of_the_cores_inside_the_span() -> None:
    # 1.5 CPU-s per second on 2 cores, then a pause; windows outside [start, end] are left out.
    samples = [Sample(T0 + i, 1.5 * min(i, 3), 100.0) for i in range(6)]
    assert cpu_fractions(samples, 2, T0, T0 + 5) == [0.75, 0.75, 0.75, 0.0, 0.0]
    assert cpu_fractions(samples, 2, T0 + 1, T0 + 3) == [0.75, 0.75]
    assert cpu_fractions(samples, 2, T0 + 0.5, T0 + 1.5) == []


def test_other_processes_are_the_machine_less_the_pipeline() -> None:
    # The machine busy 1.8 CPU-s a second, the pipeline 1.2 of them: others hold 0.3 of 2 cores.
    samples = [Sample(T0 + i, 1.2 * i, 100.0, 1000 + 1.8 * i) for i in range(5)]
    assert others_fraction(samples, 2, T0, T0 + 4) == 0.3
    assert others_fraction(samples[:1], 2, T0, T0 + 4) is None


def _line(t: float, kind: str, data: dict[str, object]) -> str:
    return json.dumps({"t": t, "node": "x", "kind": kind, "data": data})


def test_results_keep_inferred_detections_and_finished_descriptions() -> None:
    lines = [
        _line(T0, "source_state", {"source": "cam0", "state": "live"}),
        _line(T0 + 1, "detections", {"source": "cam0", "inferred": True, "latency_ms": 90.0}),
        _line(T0 + 2, "detections", {"source": "cam1", "inferred": False, "latency_ms": 1.0}),
        _line(T0 + 3, "token", {"request": 1, "text": "a"}),
        _line(T0 + 4, "event", {"what": "description", "new_tokens": 48}),
        '{"t": 1, "node": "faces", "kind": "detec',  # cut short by a kill
    ]
    records = parse_results(lines)
    assert records.detections == [Detected(T0 + 1, "cam0", 90.0)]
    assert records.tokens == [(T0 + 4, 48)]
    assert (records.start, records.end) == (T0 + 1, T0 + 1)


def test_latency_is_split_into_the_first_and_last_ten_seconds() -> None:
    # cam0: 40 ms in the first 10 s, 80 ms after; cam1 only late.
    dets = [Detected(T0 + i / 2, "cam0", 40.0 if i < 20 else 80.0) for i in range(60)]
    dets += [Detected(T0 + 25, "cam1", 100.0), Detected(T0 + 31, "cam1", 5.0)]  # past the end
    (cam0, cam1) = stream_figures(dets, T0, T0 + 30)
    assert cam0 == {"source": "cam0", "detections_per_s": 2.0, "latency_p95_first_ms": 40.0,
                    "latency_p95_last_ms": 80.0}  # fmt: skip
    assert cam1["latency_p95_first_ms"] is None
    assert cam1["latency_p95_last_ms"] == 100.0
    # A short span: each edge is half of it.
    (short,) = stream_figures([Detected(T0 + 1, "c", 1.0), Detected(T0 + 3, "c", 3.0)], T0, T0 + 4)
    assert (short["latency_p95_first_ms"], short["latency_p95_last_ms"]) == (1.0, 3.0)


STATS = """\
headroom: summary  (15.6 s)
┏━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━┳━━━━━━┳━━━━━━┳━━━━━━━┳━━━━━┳━━━━━━━━┳━━━━━━━━┳━━━━━━━━┳━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━┓
┃ node      ┃ kind   ┃ state   ┃   in ┃  out ┃ out/s ┃ err ┃ p50 ms ┃ p95 ms ┃ p99 ms ┃ busy ┃      queue ┃ dropped ┃                     info ┃
┡━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━╇━━━━━━╇━━━━━━╇━━━━━━━╇━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━┩
│ cam0      │ source │ stopped │    0 │  441 │  28.2 │   0 │      - │      - │      - │   0% │          - │       - │ decoded=421 decoder=h264 │
│           │        │         │      │      │       │     │        │        │        │      │            │         │ pool_drops=7 source=live │
│ faces     │ stage  │ done    │  151 │  151 │   9.7 │   0 │  96.72 │ 126.50 │ 148.36 │  97% │ 0/4 latest │    1616 │     model=centerface     │
│ describe  │ stage  │ done    │  151 │ 2011 │ 128.7 │   0 │      - │      - │      - │   0% │ 0/8 latest │       3 │     skipped=2            │
└───────────┴────────┴─────────┴──────┴──────┴───────┴─────┴────────┴────────┴────────┴──────┴────────────┴─────────┴──────────────────────────┘
12:40:49 INFO    edgepipe: 'headroom' ended (stop) after 15.6 s; 0 errors
"""


def test_drops_per_node_come_from_the_stats_summary() -> None:
    assert parse_dropped(STATS) == {"cam0": 7, "faces": 1616, "describe": 5}
    assert parse_dropped("no table here") == {}
    governed = STATS.replace("     model=centerface     ", " shed=900 aged=4 model=cf")
    assert parse_dropped(governed)["faces"] == 1616 + 900 + 4  # the governor's and age's count too


def _run(
    rates: list[float], cpu: float = 0.6, rss: tuple[float, float] = (400.0, 410.0)
) -> dict[str, object]:
    streams = [{"source": f"cam{i}", "detections_per_s": r, "latency_p95_first_ms": 100.0,
                "latency_p95_last_ms": 150.0} for i, r in enumerate(rates)]  # fmt: skip
    return {"cpu_p95": cpu, "detections_per_s": sum(rates), "streams": streams, "tokens_per_s": 50.0,
            "rss_start_mb": rss[0], "rss_end_mb": rss[1]}  # fmt: skip


def test_targets_pass_and_fail_on_the_governed_figures() -> None:
    assert all(ok for ok, _ in judge(_run([3.0, 3.0, 2.5, 2.0]), TARGETS).values())
    verdicts = {
        name: ok for name, (ok, _) in judge(_run([6.0, 2.5, 2.0], cpu=0.8, rss=(400, 430)), TARGETS).items()
    }
    assert verdicts == {
        "cpu_p95 <= 0.75": False,
        "detections_per_s >= 8 (all streams)": True,
        "detections_per_s >= 2 on each of 4 cameras": False,  # a camera has no detections at all
        "slowest stream >= 0.5 x the fastest": False,
        "latency_p95_last <= 1.2 x first + 50 ms": False,
        "tokens_per_s > 0": True,
        "RSS growth < 5%": False,
    }
    late = _run([3.0, 3.0, 3.0, 3.0])
    late["streams"][0]["latency_p95_last_ms"] = 171.0  # type: ignore[index]
    assert not judge(late, TARGETS)["latency_p95_last <= 1.2 x first + 50 ms"][0]


def test_figures_cut_the_warm_up_from_the_first_detection() -> None:
    dets = [Detected(T0 + 2 + i / 10, f"cam{i % 4}", 50.0) for i in range(400)]  # 10/s for 40 s
    records = Records(detections=dets, tokens=[(T0 + 5, 10), (T0 + 20, 30), (T0 + 41, 30)])
    samples = [Sample(T0 + i, 1.2 * i, 300.0 + i) for i in range(45)]
    out = figures(samples, records, {"faces": 3}, cores=2, target=0.7, warmup_s=10, seconds=40)
    assert out["measured_s"] == pytest.approx(29.9)  # 12 s .. the last detection at 41.9 s
    assert (out["cpu_mean"], out["cpu_p95"], out["within_target"]) == (0.6, 0.6, 1.0)
    assert out["detections_per_s"] == pytest.approx(10.0, abs=0.1)
    assert [s["source"] for s in out["streams"]] == ["cam0", "cam1", "cam2", "cam3"]
    assert out["tokens_per_s"] == pytest.approx(60 / 29.9, abs=0.01)
    # Means over the first and last 10 s: samples 12..22 s and 32..41 s.
    assert (out["rss_start_mb"], out["rss_end_mb"]) == (317.0, 336.5)
    assert out["dropped"] == {"faces": 3}
    assert out["others_cpu_mean"] == 0.0
    with pytest.raises(ValueError, match="no detections"):
        figures(samples, Records(), {}, cores=2, target=0.7, warmup_s=10, seconds=40)


def test_flags_are_detected_in_the_help_and_give_the_target() -> None:
    help_text = "  --headroom FRAC  keep this share free\n  --no-governor-x  other\n"
    assert supported(("--headroom", "0.3"), help_text)
    assert not supported(("--no-governor",), help_text)
    assert supported((), help_text)
    assert headroom_target(("--headroom", "0.25")) == 0.75
    assert headroom_target(("--no-governor",)) == 0.7
    assert ratio(1.0, 2.0) == 0.5
    assert ratio(1.0, 0.0) is None
    assert ratio(None, 2.0) is None
