#!/usr/bin/env python3
"""What offloading the language model saves the box: the describe workload of
:mod:`scripts.bench.headroom.pipeline` (four 1080p cameras, CenterFace, a description written
continuously) with its LM local, then on a real llama.cpp server, then on that server killed
mid-run with the local model as the fallback.

The server (``scripts/llama_server.py``: built once per machine) stands in for another machine:
it runs at ``nice 19`` and its CPU is not counted; only the edgepipe process's is
(``/proc/PID/stat``, sampled every second). It serves a tiny GGUF (``scripts/tiny_gguf.py``),
the local side the benchmark LM of :mod:`scripts.bench.headroom` (~10M parameters).

Per run, after ``--warmup``: the box's CPU-s per generated token (the process's CPU over the
tokens of the descriptions finished in the span: what the box pays for the whole workload, per
token), tokens/s, TTFT p50 and p95 (the descriptions' ``ttft_ms``), and the detections/s the box
keeps (model runs). Then the fallback run: the server is killed ``--kill-at`` seconds into it; the
gap is from the kill to the first token of the first description the local model wrote after it,
less the wait until that request was scheduled (its start, its first token less its TTFT, if
later than the kill). Targets: ``box_cpu_per_token_remote_over_local`` <= 0.2 and
``fallback_gap_s`` <= 2 x the first-token deadline.

    python -m scripts.bench.offload                   # 30 s runs, 10 s warm-up (~3 min)
    python -m scripts.bench.offload --seconds 20 --warmup 5 --keep /tmp/off

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from scripts import llama_server, tiny_gguf
from scripts.bench.headroom.bench import GOVERNED_FLAGS, camera_clip, run_pipeline, tiny_lm
from scripts.bench.headroom.figures import Sample, percentile

FIRST_TOKEN_S = 2.0
TARGET_RATIO = 0.2
TARGET_GAP_FACTOR = 2.0


def descriptions(results: Path) -> list[dict[str, Any]]:
    """The run's description events, with their result line's time ``t`` and first token's ``t``."""
    events: list[dict[str, Any]] = []
    first_token: dict[int, float] = {}
    for line in results.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        data = record.get("data") if isinstance(record, dict) else None
        if not isinstance(data, dict):
            continue
        if record.get("kind") == "token":
            first_token.setdefault(int(data.get("request", 0)), float(record["t"]))
        elif record.get("kind") == "event" and data.get("what") == "description":
            events.append({**data, "t": float(record["t"]), "t_first": first_token.get(int(data["request"]))})
    return events


def cpu_between(samples: list[Sample], start: float, end: float) -> float | None:
    inside = [s for s in samples if start <= s.t <= end]
    return inside[-1].cpu_s - inside[0].cpu_s if len(inside) >= 2 else None


def run_figures(samples: list[Sample], results: Path, detections: int, warmup: float) -> dict[str, Any]:
    if not samples:
        raise RuntimeError(f"{results}: no CPU samples")
    start = samples[0].t + warmup
    end = samples[-1].t
    events = [e for e in descriptions(results) if start <= e["t"] <= end]
    tokens = sum(int(e.get("new_tokens") or 0) for e in events)
    cpu = cpu_between(samples, start, end)
    ttft = [float(e["ttft_ms"]) for e in events if e.get("ttft_ms")]
    span = end - start
    return {
        "descriptions": len(events),
        "engines": sorted({str(e.get("engine")) for e in events}),
        "tokens": tokens,
        "tokens_per_s": round(tokens / span, 2) if span > 0 else None,
        "box_cpu_s": round(cpu, 2) if cpu is not None else None,
        "box_cpu_per_token_ms": round(1000 * cpu / tokens, 3) if cpu is not None and tokens else None,
        "ttft_p50_ms": round(statistics.median(ttft), 1) if ttft else None,
        "ttft_p95_ms": round(percentile(ttft, 95) or 0.0, 1) if ttft else None,
        "detections_per_s": round(detections / span, 2) if span > 0 else None,
    }


def detections_in(records: Any, start: float, end: float) -> int:
    return sum(1 for o in records.detections if start <= o.t <= end)


def measured(label: str, flags: tuple[str, ...], clip: Path, lm: Path, folder: Path, seconds: float,
             warmup: float, each_second: Any = None) -> tuple[dict[str, Any], list[Sample]]:  # fmt: skip
    print(f"{label}: {seconds:g} s ({warmup:g} s warm-up) {' '.join(flags)}", file=sys.stderr, flush=True)
    samples, records, _ = run_pipeline(flags, clip, lm, seconds, folder, label, each_second=each_second)
    start = samples[0].t + warmup if samples else 0.0
    end = samples[-1].t if samples else 0.0
    figures = run_figures(samples, folder / f"{label}.jsonl", detections_in(records, start, end), warmup)
    print(f"{label}: {json.dumps(figures)}", file=sys.stderr, flush=True)
    return figures, samples


def fallback_gap(results: Path, t_kill: float) -> float | None:
    """From the kill to the first token of the first local description after it, less the wait
    until that request began (if it began after the kill)."""
    for event in descriptions(results):
        if event.get("engine") != "local" or event.get("t_first") is None or event["t_first"] < t_kill:
            continue
        first = float(event["t_first"])
        began = first - float(event.get("ttft_ms") or 0.0) / 1000
        return round(first - max(t_kill, began), 3)
    return None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--kill-at", type=float, default=20.0, help="seconds into the fallback run")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs' files in this folder")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if llama_server.binary() is None:
        print(f"bench offload: {llama_server.missing_reason()}", file=sys.stderr)
        return 2
    clip, lm = camera_clip(), tiny_lm()
    with tempfile.TemporaryDirectory(prefix="bench-offload-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        model = tiny_gguf.write(folder / "engine.gguf", ctx=1024)
        server = llama_server.Server(
            model, slots=1, ctx=1024, log=folder / "llama-server.log", nice=19
        ).start()
        try:
            local, _ = measured("local", GOVERNED_FLAGS, clip, lm, folder, args.seconds, args.warmup)
            remote_flags = (*GOVERNED_FLAGS, "--server", server.url, "--first-token-s", f"{FIRST_TOKEN_S:g}")
            remote, _ = measured("remote", remote_flags, clip, lm, folder, args.seconds, args.warmup)
            killed: list[float] = []
            t_run = time.monotonic()

            def kill_on_time() -> None:
                if not killed and time.monotonic() - t_run >= args.kill_at:
                    killed.append(time.time())
                    threading.Thread(target=server.kill, daemon=True).start()

            fallback, _ = measured("fallback", (*remote_flags, "--fallback", "true"), clip, lm, folder,
                                   args.seconds, args.warmup, each_second=kill_on_time)  # fmt: skip
        finally:
            server.stop()
        gap = fallback_gap(folder / "fallback.jsonl", killed[0]) if killed else None
    ratio = None
    if local["box_cpu_per_token_ms"] and remote["box_cpu_per_token_ms"]:
        ratio = round(remote["box_cpu_per_token_ms"] / local["box_cpu_per_token_ms"], 3)
    per_token = f"local {local['box_cpu_per_token_ms']} ms, remote {remote['box_cpu_per_token_ms']} ms"
    print(f"box CPU per token: {per_token}: remote/local {ratio} (target <= {TARGET_RATIO})")
    ttft = {k: f"{v['ttft_p50_ms']}/{v['ttft_p95_ms']} ms" for k, v in (("local", local), ("remote", remote))}
    print(f"tokens/s: local {local['tokens_per_s']}, remote {remote['tokens_per_s']}; "
          f"TTFT p50/p95: local {ttft['local']}, remote {ttft['remote']}")  # fmt: skip
    kept = f"local {local['detections_per_s']}, remote {remote['detections_per_s']}"
    print(f"detections/s the box keeps: {kept}")
    print(f"fallback gap: {gap} s after the kill (target <= {TARGET_GAP_FACTOR * FIRST_TOKEN_S:g} s, 2 x the "
          f"first-token deadline {FIRST_TOKEN_S:g} s)")  # fmt: skip
    ok = (
        ratio is not None
        and ratio <= TARGET_RATIO
        and gap is not None
        and gap <= TARGET_GAP_FACTOR * FIRST_TOKEN_S
    )
    print(json.dumps({
        "bench": "offload", "seconds": args.seconds, "warmup": args.warmup, "local": local, "remote": remote,
        "fallback": fallback, "box_cpu_per_token_remote_over_local": ratio, "fallback_gap_s": gap,
        "first_token_s": FIRST_TOKEN_S, "ok": ok,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
