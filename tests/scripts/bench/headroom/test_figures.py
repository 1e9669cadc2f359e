"""One run's figures (scripts/bench/headroom/figures.py) on made-up data: no subprocess, no model."""

from __future__ import annotations

import json

import pytest

from scripts.bench.headroom.figures import (
    Description,
    Output,
    Records,
    Sample,
    cpu_fractions,
    cpu_rate,
    decoded_per_s,
    figures,
    others_fraction,
    parse_budget,
    parse_dropped,
    parse_models,
    parse_results,
    parse_stats,
    percentile,
    rate_cv,
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
    assert cpu_rate(samples, T0 + 1, T0 + 3) == 1.5  # CPU-s per s, first to last sample inside
    assert cpu_rate(samples, T0 + 0.5, T0 + 1.5) is None


def test_other_processes_are_the_machine_less_the_pipeline() -> None:
    # The machine busy 1.8 CPU-s a second, the pipeline 1.2 of them: others hold 0.3 of 2 cores.
    samples = [Sample(T0 + i, 1.2 * i, 100.0, 1000 + 1.8 * i) for i in range(5)]
    assert others_fraction(samples, 2, T0, T0 + 4) == 0.3
    assert others_fraction(samples[:1], 2, T0, T0 + 4) is None


def _line(t: float, kind: str, data: dict[str, object]) -> str:
    return json.dumps({"t": t, "node": "x", "kind": kind, "data": data})


def test_results_keep_every_detector_output_descriptions_and_the_time_of_every_line() -> None:
    lines = [
        _line(T0, "source_state", {"source": "cam0", "state": "live"}),
        _line(T0 + 1, "detections", {"source": "cam0", "seq": 30, "inferred": True, "latency_ms": 90.0,
                                     "infer_ms": 41.5}),
        _line(T0 + 2, "detections", {"source": "cam1", "seq": 31, "inferred": False, "latency_ms": 1.0,
                                     "infer_ms": None}),
        _line(T0 + 3, "token", {"request": 1, "text": "a"}),
        _line(T0 + 4, "event", {"what": "description", "new_tokens": 48, "prompt_tokens": 145}),
        '{"t": 1, "node": "faces", "kind": "detec',  # cut short by a kill
    ]  # fmt: skip
    records = parse_results(lines)
    assert records.outputs == [
        Output(T0 + 1, "cam0", 90.0, True, 30, 41.5),
        Output(T0 + 2, "cam1", 1.0, False, 31),
    ]
    assert records.detections == records.outputs[:1]  # the model ran on that one only
    assert records.descriptions == [Description(T0 + 4, 48, 145)]
    assert records.written == [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 4]
    assert (records.start, records.end) == (T0 + 1, T0 + 2)


def test_latency_is_split_into_the_first_and_last_ten_seconds() -> None:
    # cam0: 40 ms in the first 10 s, 80 ms after; cam1 only late.
    dets = [Output(T0 + i / 2, "cam0", 40.0 if i < 20 else 80.0) for i in range(60)]
    dets += [Output(T0 + 25, "cam1", 100.0), Output(T0 + 31, "cam1", 5.0)]  # past the end
    (cam0, cam1) = stream_figures(dets, T0, T0 + 30)
    assert cam0["detections_per_s"] == 2.0
    assert (cam0["latency_p95_first_ms"], cam0["latency_p95_last_ms"]) == (40.0, 80.0)
    assert cam1["latency_p95_first_ms"] is None
    assert cam1["latency_p95_last_ms"] == 100.0
    # A short span: each edge is half of it.
    (short,) = stream_figures([Output(T0 + 1, "c", 1.0), Output(T0 + 3, "c", 3.0)], T0, T0 + 4)
    assert (short["latency_p95_first_ms"], short["latency_p95_last_ms"]) == (1.0, 3.0)


def test_a_stream_counts_runs_and_carries_as_outputs_and_its_frame_numbers_as_decoded() -> None:
    # 30 frames/s decoded; 6 a second reach the detector, the model runs on one in 3 of them.
    outs = [Output(T0 + i / 6, "cam0", 50.0 if i % 3 == 0 else 1.0, i % 3 == 0, seq=5 * i) for i in range(60)]
    (cam0,) = stream_figures(outs, T0, T0 + 10)
    assert (cam0["detections_per_s"], cam0["outputs_per_s"]) == (2.0, 6.0)
    assert cam0["decoded_per_s"] == 30.0
    assert cam0["rate_cv"] == 0.0  # six a second, every second
    assert cam0["latency_p95_first_ms"] == 50.0  # the latency of the model's results only
    assert decoded_per_s(outs[:1]) is None
    assert decoded_per_s([Output(T0, "c", None), Output(T0 + 1, "c", None)]) is None  # no frame numbers


def test_rate_cv_is_the_spread_of_the_per_second_counts() -> None:
    # 4, 6, 4, 6 outputs in the four whole seconds: mean 5, sample stdev 1.155.
    times = [T0 + k + j / 10 for k, n in enumerate([4, 6, 4, 6]) for j in range(n)]
    assert rate_cv(times, T0, T0 + 4.5) == pytest.approx(1.1547 / 5, abs=1e-3)
    assert rate_cv([T0 + k + 0.5 for k in range(10)], T0, T0 + 10) == 0.0
    assert rate_cv(times, T0, T0 + 1.5) is None  # one whole window: no spread to speak of
    assert rate_cv([], T0, T0 + 10) is None  # nothing came


STATS = """\
headroom: summary  (40.8 s; latency p50/p95/p99 in ms)
node       state     in   out  out/s  err   p50   p95   p99  busy  queue       drop
───────────────────────────────────────────────────────────────────────────────────
cam0       stopped    -  1138   27.9    0     -     -     -    0%  -              -
faces      done     448   448   11.0    0  81.4   122   147   94%  0/4 latest  4098
describe   done     448   161    3.9    0     -     -     -    0%  0/8 latest     3
                                                                   0/2 block
words_out  done     161     -      -    0  0.00  0.00  0.00    0%  0/64 block   1.2M
cam0      decoded=1181 decoder=h264 (software) pool_drops=42 source=live
          unsent=1
faces     model=centerface provider=CPU input=640x384 infer_ms=47.6 shed=900 aged=4
describe  skipped=2 model=tiny-lm
CPU 44% of 2 core(s), target 70% · governor level 2/35: describe paced to 40% of the time ·
detect/LM overlap 0.0 s
12:40:49 INFO    edgepipe: 'headroom' ended (stop) after 40.8 s; 0 errors
"""


def test_drops_and_gauges_per_node_come_from_the_last_stats_summary() -> None:
    nodes = parse_stats("node state drop\nold done 2\n" + STATS)  # an earlier table is forgotten
    assert sorted(nodes) == ["cam0", "describe", "faces", "words_out"]
    assert nodes["cam0"].info == {"decoded": "1181", "decoder": "h264", "pool_drops": "42", "source": "live",
                                  "unsent": "1"}  # fmt: skip
    assert nodes["words_out"].dropped == 1_200_000
    # A source's pool drops, the governor's sheds, aged items and skips count with the inbox's.
    assert parse_dropped(STATS) == {
        "cam0": 42,
        "faces": 4098 + 900 + 4,
        "describe": 5,
        "words_out": 1_200_000,
    }
    assert parse_dropped("no table here") == {}


def test_what_each_model_was_loaded_with_comes_from_the_log() -> None:
    log = (
        "05:31:18 INFO    edgepipe.sched: CPU budget: 2 usable core(s) (affinity 2) x 0.70 = 1.40; 1 heavy call "
        "unit(s) at once; 1 ONNX Runtime thread(s) per model; governed\n"
        "05:31:20 INFO    edgepipe.infer.session: model /m/tiny lm: loaded in 1455 ms on CPUExecutionProvider, "
        "1 thread\n"
        "05:31:20 INFO    edgepipe.infer.session: model centerface: loaded in 67 ms on CPUExecutionProvider, "
        "2 threads, spinning (cached optimized graph)\n"
    )
    assert parse_models(log) == {
        "/m/tiny lm": {"threads": 1, "provider": "CPUExecutionProvider", "spinning": False, "cached": False},
        "centerface": {"threads": 2, "provider": "CPUExecutionProvider", "spinning": True, "cached": True},
    }
    assert parse_budget(log) == (
        "CPU budget: 2 usable core(s) (affinity 2) x 0.70 = 1.40; 1 heavy call unit(s) at once; "
        "1 ONNX Runtime thread(s) per model; governed"
    )
    assert parse_budget("nothing") is None


def test_figures_cut_the_warm_up_from_the_first_detection() -> None:
    # 10 outputs/s for 40 s from T0 + 2, half of them carries; 30 frames/s decoded per camera.
    outs = [Output(T0 + 2 + i / 10, f"cam{i % 4}", 50.0, i % 8 < 4, seq=3 * i, infer_ms=40.0 + i % 4)
            for i in range(400)]  # fmt: skip
    descriptions = [
        Description(T0 + 5, 10, 100),
        Description(T0 + 20, 30, 150),
        Description(T0 + 41, 30, 200),
    ]
    records = Records(outputs=outs, descriptions=descriptions, written=[T0 + i / 4 for i in range(200)])
    samples = [Sample(T0 + i, 1.2 * i, 300.0 + i, 2.0 * i, threads=20 + i % 3) for i in range(45)]
    out = figures(samples, records, {"faces": 3}, cores=2, target=0.7, warmup_s=10, seconds=40)
    assert out["measured_s"] == pytest.approx(29.9)  # 12 s .. the last output at 41.9 s
    assert (out["cpu_mean"], out["cpu_p95"], out["within_target"], out["cpu_s_per_s"]) == (0.6, 0.6, 1.0, 1.2)
    assert out["detections_per_s"] == pytest.approx(5.0, abs=0.1)
    assert out["carries_per_s"] == pytest.approx(5.0, abs=0.1)
    assert out["frames_decoded_per_s"] == pytest.approx(120.0)
    assert out["results_per_s"] == pytest.approx(120 / 29.9, abs=0.01)  # lines at 12 .. 41.75 s
    assert [s["source"] for s in out["streams"]] == ["cam0", "cam1", "cam2", "cam3"]
    assert set(out["rate_cv"]) == {"cam0", "cam1", "cam2", "cam3"}
    assert (out["tokens_per_s"], out["prompt_tokens_per_s"]) == (round(60 / 29.9, 2), round(350 / 29.9, 2))
    assert (out["infer_ms_mean"], out["infer_ms_median"]) == (41.5, 41.5)  # model runs only: 40..43 ms
    # Means over the first and last 10 s: samples 12..22 s and 32..41 s.
    assert (out["rss_start_mb"], out["rss_end_mb"]) == (317.0, 336.5)
    assert out["threads"] == 21
    assert out["dropped"] == {"faces": 3}
    assert out["others_cpu_mean"] == 0.4  # the machine busy 2 CPU-s a second, the pipeline 1.2 of 2 cores
    with pytest.raises(ValueError, match="no detections"):
        figures(samples, Records(), {}, cores=2, target=0.7, warmup_s=10, seconds=40)
