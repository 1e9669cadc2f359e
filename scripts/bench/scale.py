#!/usr/bin/env python3
"""How cost grows with the work: the governed headroom workload with 1, 2, 4 and 8 cameras.

Each count runs :mod:`scripts.bench.headroom.pipeline` (one Detector for every camera, keeping up by
its interval; a Describe writing continuously; ``--headroom 0.3``) as a subprocess, every camera
the same 720p30 clip played live and looped, for ``--seconds`` (the first ``--warmup`` left
out), ``--repeats`` times in the order 1, 2, 4, 8, 1, 2, ... Its CPU is read from
``/proc/PID/stat`` each second and its heartbeat (``--health-file``) as often: the CPU ledger in
it says how many CPU-seconds the detector's model calls took (the ledger's ``model`` kind of
node ``faces``: its runs' threads, ONNX Runtime's included).

Per count (medians over the repeats): results a second per camera and as a share of the
camera's frame rate (the worst camera's), model runs a second, the process's CPU-s per result
and per model run, the model calls' CPU-s per model run, the median camera's ``rate_cv`` (its
results per 1 s window) and the worst camera's latency p95. Micro-batching
(``Detector(batch_size=N)``) is left off: CenterFace on one intra-op thread costs the same per
frame in a batch of 1, 2 or 4 on this kind of machine (160 CPU-ms each), and batches would wait.

    python -m scripts.bench.scale                       # 40 s runs, 10 s warm-up, 2 repeats (~8 min)
    python -m scripts.bench.scale --seconds 20 --warmup 5 --repeats 1 --counts 1,8   # a quicker look

Targets: ``cost_per_model_run_8_over_1`` <= 1.15 (the model calls' CPU-s per run at 8
cameras over 1); at 8 cameras every camera gets >= 0.9 x its frame rate in results (carried or
inferred). The last line printed is one JSON object; ``--check`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts.bench.headroom.bench import GOVERNED_FLAGS, headroom_target, run_pipeline, tiny_lm
from scripts.bench.headroom.figures import Records, Sample, figures, percentile
from scripts.bench.proc import usable_cores
from scripts.bench.verdict import print_targets, targets_json

COUNTS = (1, 2, 4, 8)
CLIP = {"width": 1280, "height": 720, "fps": 30, "seconds": 8.0}
DETECTOR = "faces"
"""The detector's node id in :mod:`scripts.bench.headroom.pipeline`."""
TARGET_COST_RATIO = 1.15
TARGET_RESULTS_SHARE = 0.9
COST = f"cost_per_model_run_8_over_1 <= {TARGET_COST_RATIO}"


def model_seconds(beat: dict[str, Any], node: str = DETECTOR) -> float | None:
    """The CPU-seconds of ``node``'s model calls so far, from a heartbeat's CPU ledger."""
    ledger = (beat.get("sched") or {}).get("cpu_ledger") or {}
    kinds = ((ledger.get("nodes") or {}).get(node) or {}).get("kinds_s") or {}
    value = kinds.get("model")
    return float(value) if isinstance(value, int | float) else None


def count_figures(
    samples: Sequence[Sample], records: Records, beats: Sequence[tuple[float, float]], *, cameras: int,
    cores: float, target: float, warmup_s: float, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    """One run's figures at one camera count. ``beats``: (time, model CPU-s so far) from its
    heartbeats; the model calls' cost per run is taken between the first and the last of them
    inside the measured span."""
    run = figures(samples, records, {}, cores=cores, target=target, warmup_s=warmup_s, seconds=seconds)
    assert records.start is not None
    assert records.end is not None
    start, end = records.start + warmup_s, min(records.start + seconds, records.end)
    span = end - start
    inside = [o for o in records.outputs if start <= o.t <= end]
    runs = sum(o.inferred for o in inside)
    cpu_s = (run["cpu_s_per_s"] or 0.0) * span
    kept = [b for b in beats if start <= b[0] <= end]
    model_cpu_per_run = None
    if len(kept) >= 2:
        (t0, m0), (t1, m1) = kept[0], kept[-1]
        ran = sum(1 for o in records.outputs if o.inferred and t0 < o.t <= t1)
        model_cpu_per_run = (m1 - m0) / ran if ran else None
    streams = run["streams"]
    shares = [s["outputs_per_s"] / s["decoded_per_s"] for s in streams if s.get("decoded_per_s")]
    latencies = [
        percentile([o.latency_ms for o in inside if o.source == s["source"] and o.latency_ms is not None], 95)
        for s in streams
    ]
    cvs = [s["rate_cv"] for s in streams if s.get("rate_cv") is not None]
    known = [v for v in latencies if v is not None]
    return {
        "cameras": cameras,
        "measured_s": round(span, 1),
        "results_per_camera_per_s": round(len(inside) / span / cameras, 2),
        "results_share_worst": round(min(shares), 3) if shares else None,
        "model_runs_per_s": round(runs / span, 2),
        "cpu_mean": run["cpu_mean"],
        "cpu_s_per_result": round(cpu_s / len(inside), 5) if inside else None,
        "cpu_s_per_model_run": round(cpu_s / runs, 4) if runs else None,
        "model_cpu_s_per_run": None if model_cpu_per_run is None else round(model_cpu_per_run, 4),
        "rate_cv_median": round(statistics.median(cvs), 3) if cvs else None,
        "latency_p95_worst_ms": round(max(known), 1) if known else None,
    }


def medians(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs of one count (the runs' count kept)."""
    out: dict[str, Any] = {"cameras": runs[0]["cameras"], "runs": len(runs)}
    for key in runs[0]:
        if key == "cameras":
            continue
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = round(statistics.median(values), 5) if values else None
    return out


def judge(by_count: dict[int, dict[str, Any]]) -> dict[str, tuple[bool, Any]]:
    """The targets, each (met, the figure behind it)."""
    one, eight = by_count.get(1, {}), by_count.get(8, {})
    a, b = one.get("model_cpu_s_per_run"), eight.get("model_cpu_s_per_run")
    cost = round(b / a, 3) if a and b else None
    share = eight.get("results_share_worst")
    return {
        COST: (cost is not None and cost <= TARGET_COST_RATIO, cost),
        f"every camera's results >= {TARGET_RESULTS_SHARE} x its frame rate at 8 cameras": (
            share is not None and share >= TARGET_RESULTS_SHARE, share),
    }  # fmt: skip


def one_run(
    cameras: int, clip: Path, lm: Path, folder: Path, label: str, args: argparse.Namespace, cores: float
) -> dict[str, Any]:
    beat_file = folder / f"{label}.health.json"
    beats: list[tuple[float, float]] = []

    def read_beat() -> None:
        try:
            beat = json.loads(beat_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        model = model_seconds(beat)
        if model is not None and (not beats or beat["t"] > beats[-1][0]):
            beats.append((float(beat["t"]), model))

    print(f"{label}: {cameras} camera(s), {args.seconds:g} s ({args.warmup:g} s warm-up)", file=sys.stderr,
          flush=True)  # fmt: skip
    flags = (*GOVERNED_FLAGS, "--health-file", str(beat_file))
    samples, records, _ = run_pipeline(flags, clip, lm, args.seconds, folder, label, cameras=cameras,
                                       each_second=read_beat)  # fmt: skip
    read_beat()  # the last one, written as the nodes finished
    return count_figures(samples, records, beats, cameras=cameras, cores=cores,
                         target=headroom_target(GOVERNED_FLAGS), warmup_s=args.warmup,
                         seconds=args.seconds)  # fmt: skip


ROWS = ("results_per_camera_per_s", "results_share_worst", "model_runs_per_s", "cpu_mean",
        "cpu_s_per_result", "cpu_s_per_model_run", "model_cpu_s_per_run", "rate_cv_median",
        "latency_p95_worst_ms", "runs")  # fmt: skip


def report(by_count: dict[int, dict[str, Any]], verdicts: dict[str, tuple[bool, Any]]) -> None:
    counts = sorted(by_count)
    print(f"\n{'cameras':28}" + "".join(f"{c:>12}" for c in counts))
    for key in ROWS:
        cells = [by_count[c].get(key) for c in counts]
        print(f"{key:28}" + "".join(f"{'-' if v is None else v:>12}" for v in cells))
    print_targets(verdicts, width=70)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each run (default 40)")
    parser.add_argument("--warmup", type=float, default=10.0, help="left out at the start (default 10)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per camera count; medians (default 2)")
    parser.add_argument(
        "--counts", default=",".join(map(str, COUNTS)), help="camera counts (default 1,2,4,8)"
    )
    parser.add_argument("--keep", type=Path, help="keep each run's results, stderr and heartbeat here")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    try:
        args.counts = sorted({int(c) for c in args.counts.split(",") if c.strip()})
    except ValueError:
        parser.error(f"--counts must be a comma list of camera counts, got {args.counts!r}")
    if not args.counts or min(args.counts) < 1:
        parser.error("--counts must name at least one count, each at least 1")
    if not 0 <= args.warmup < args.seconds or args.repeats < 1:
        parser.error("--warmup must be at least 0 and shorter than --seconds; --repeats at least 1")
    return args


def main() -> int:
    args = parse_args()
    from scripts.make_sample_clip import cached_clip

    clip = cached_clip(float(CLIP["seconds"]), int(CLIP["width"]), int(CLIP["height"]), int(CLIP["fps"]))
    lm, cores = tiny_lm(), usable_cores()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    runs: dict[int, list[dict[str, Any]]] = {c: [] for c in args.counts}
    try:
        for repeat in range(args.repeats):  # counts interleaved: a drift of the machine hits them all
            for cameras in args.counts:
                runs[cameras].append(
                    one_run(cameras, clip, lm, folder, f"{cameras}cam-{repeat + 1}", args, cores)
                )
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    by_count = {c: medians(r) for c, r in runs.items()}
    verdicts = judge(by_count)
    print(f"clip {clip}; LM {lm.name}; {cores:g} usable cores; {args.repeats} run(s) per count, medians")
    report(by_count, verdicts)
    ok = all(met for met, _ in verdicts.values())
    one, eight = by_count.get(1, {}), by_count.get(8, {})
    cost = verdicts[COST][1]
    print(json.dumps({
        "bench": "scale", "counts": {str(c): f for c, f in by_count.items()},
        "runs": {str(c): r for c, r in runs.items()},
        "cost_per_model_run_8_over_1": cost,
        "results_per_camera_per_s": {str(c): f["results_per_camera_per_s"] for c, f in by_count.items()},
        "model_cpu_s_per_run_1": one.get("model_cpu_s_per_run"),
        "model_cpu_s_per_run_8": eight.get("model_cpu_s_per_run"),
        "targets": targets_json(verdicts),
        "cores": cores, "ok": ok,
    }))  # fmt: skip
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
