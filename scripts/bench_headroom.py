#!/usr/bin/env python3
"""CPU headroom under overload: the same pipeline governed and ungoverned, measured from outside.

The overload (``scripts/headroom_pipeline.py``): four camera-like 1080p30 clips played at their
own speed and looped, CenterFace wanted on every frame of each (one Detector fed by all four),
and a Describe node writing continuously with a small random-weight LM. It runs as a
subprocess (``python -m edgepipe run``, so the PID measured is the pipeline's own), once with
:data:`GOVERNED_FLAGS` and once with :data:`UNGOVERNED_FLAGS`; every second the process's CPU
(``/proc/PID/stat`` utime + stime) and RSS are read. Each run's clock starts at its first
detection; the first ``--warmup`` seconds are left out. Figures (``headroom_figures.py``):
CPU per 1 s window as a fraction of the usable cores (mean, p95, share within target + 0.05),
detections/s in all and per camera (frames the model ran on), per camera the p95 latency from
the frame leaving the decoder to its detection over the first and last 10 s, tokens/s, items
dropped per node over the whole run (the ``--stats`` summary), RSS after warm-up and at the
end (each the mean over those same 10 s: RSS swings by tens of MB from second to second), and
the CPU the machine's other processes took meanwhile (``/proc/stat``: a shared
machine's noise, which hits the two runs unevenly).

    python scripts/bench_headroom.py                           # 40 s each, 10 s warm-up (~2 min)
    python scripts/bench_headroom.py --seconds 20 --warmup 5   # a quicker look
    python scripts/bench_headroom.py --check                   # exit 1 if a target is missed

Targets (issue 12), on the governed run: cpu_p95 <= 0.75; >= 8 detections/s in all and >= 2 on
each camera; the slowest camera >= half the fastest; per camera, last-10-s latency p95 <= 1.2 x
the first + 50 ms; tokens/s > 0; RSS growth < 5%. The ungoverned run is printed beside it, with
the governed/ungoverned ratios. When ``edgepipe run`` does not know the governor's flags yet,
both runs are ungoverned (a warning says so). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from headroom_figures import Records, Sample, Targets, figures, judge, parse_dropped, parse_results, ratio

GOVERNED_FLAGS = ("--headroom", "0.3")
UNGOVERNED_FLAGS = ("--no-governor",)
DEFAULT_HEADROOM = 0.3
"""The headroom the target follows when the flags above do not say one."""

TARGETS = Targets(
    cpu_p95=0.75,
    detections_per_s=8.0,
    per_camera=2.0,
    fairness=0.5,
    latency_growth=1.2,
    latency_slack_ms=50.0,
    rss_growth=0.05,
    cameras=4,
)
CLIP = {"width": 1920, "height": 1080, "fps": 30, "seconds": 8.0}  # first loop inside the warm-up
"""The camera clip (every camera plays it, looped)."""
LM = {"hidden": 384, "layers": 6, "heads": 6, "kv_heads": 2, "ffn": 1024}
"""The writer: ~10M parameters, ~2 ms a token alone on this kind of machine (``edgepipe bench lm``)."""

SCRIPTS = Path(__file__).resolve().parent
PIPELINE = SCRIPTS / "headroom_pipeline.py"
CACHE = SCRIPTS.parent / ".cache" / "bench"
SAMPLE_EVERY_S = 1.0
EXIT_GRACE_S = 60.0
"""How long a run may take beyond its duration (start-up, drain) before it is killed."""


def usable_cores() -> float:
    """The cores this process may use: its affinity, capped by the cgroup's ``cpu.max`` quota."""
    cores = float(len(os.sched_getaffinity(0)))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    return cores if quota == "max" else min(cores, int(quota) / int(period))


def headroom_target(flags: tuple[str, ...]) -> float:
    """The CPU target the governed flags ask for: 1 - headroom."""
    headroom = DEFAULT_HEADROOM
    if "--headroom" in flags and flags.index("--headroom") + 1 < len(flags):
        headroom = float(flags[flags.index("--headroom") + 1])
    return round(1.0 - headroom, 3)


def supported(flags: tuple[str, ...], help_text: str) -> bool:
    """Whether every option in ``flags`` appears in ``edgepipe run --help``."""
    options = [f for f in flags if f.startswith("--")]
    return all(re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", help_text) for f in options)


def run_help() -> str:
    return subprocess.run(
        [sys.executable, "-m", "edgepipe", "run", "--help"], capture_output=True, text=True, timeout=60
    ).stdout


def camera_clip() -> Path:
    """The clip, made once into the temp folder (keyed on its size, rate and length) and reused."""
    sys.path.insert(0, str(SCRIPTS))
    from make_sample_clip import cached_clip

    return cached_clip(float(CLIP["seconds"]), int(CLIP["width"]), int(CLIP["height"]), int(CLIP["fps"]))


def tiny_lm() -> Path:
    """The LM folder under ``.cache/bench`` (git-ignored), keyed on its size; made once."""
    sys.path.insert(0, str(SCRIPTS))
    from tiny_lm import TinyConfig, write

    folder = CACHE / ("tiny-lm-gqa-" + "-".join(f"{k}{v}" for k, v in LM.items()))
    if not (folder / "model.onnx").is_file():
        print(f"making {folder} ...", file=sys.stderr)
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        write(partial, TinyConfig(**LM), "gqa")
        partial.rename(folder)
    return folder


def read_proc(pid: int) -> tuple[float, float] | None:
    """``(cpu_s, rss_mb)`` of a process from ``/proc/PID/stat``; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the name may hold spaces: fields start at 3
    utime, stime, rss_pages = int(fields[11]), int(fields[12]), int(fields[21])  # fields 14, 15, 24
    return (utime + stime) / os.sysconf("SC_CLK_TCK"), rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot: ``/proc/stat`` less idle and iowait."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def run_pipeline(
    flags: tuple[str, ...], clip: Path, lm: Path, seconds: float, folder: Path, label: str
) -> tuple[list[Sample], Records, str]:
    """Run the pipeline for ``seconds``, sampling it every second: (samples, results, stderr)."""
    results, log = folder / f"{label}.jsonl", folder / f"{label}.stderr"
    command = [
        sys.executable, "-m", "edgepipe", "run", str(PIPELINE), "--duration", f"{seconds:g}",
        "--results", str(results), "--stats", *flags,
        "--clip", str(clip), "--model", str(lm), "--cameras", str(TARGETS.cameras),
    ]  # fmt: skip
    samples: list[Sample] = []
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # the --stats table's box characters
    with log.open("w", encoding="utf-8") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = time.monotonic() + seconds + EXIT_GRACE_S
        tick = time.monotonic()
        while proc.poll() is None:
            t = time.time()
            read = read_proc(proc.pid)
            if read is not None:
                samples.append(Sample(t, *read, machine_busy_s()))
            if time.monotonic() > deadline:
                proc.kill()
                print(f"{label}: running {EXIT_GRACE_S:g} s past its duration: killed", file=sys.stderr)
                break
            tick += SAMPLE_EVERY_S
            time.sleep(max(0.0, tick - time.monotonic()))
        proc.wait()
    with (folder / f"{label}.samples.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(dataclasses.asdict(s)) + "\n" for s in samples)
    stderr = log.read_text(encoding="utf-8")
    if proc.returncode != 0:
        tail = "\n".join(stderr.splitlines()[-20:])
        raise RuntimeError(f"{label} run exited {proc.returncode}:\n{tail}")
    with results.open(encoding="utf-8") as f:
        records = parse_results(f)
    return samples, records, stderr


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def report(runs: dict[str, dict[str, Any]], target: float, governed_real: bool) -> bool:
    """Print the figures side by side, the ratios, and each target; True if all are met."""
    gov, ungov = runs["governed"], runs["ungoverned"]
    print(f"\n{'':24} {'governed':>12} {'ungoverned':>12} {'ratio':>8}")
    for key in ("cpu_mean", "cpu_p95", "within_target", "detections_per_s", "tokens_per_s",
                "rss_start_mb", "rss_end_mb", "others_cpu_mean"):  # fmt: skip
        print(f"{key:24} {_fmt(gov[key]):>12} {_fmt(ungov[key]):>12} {_fmt(ratio(gov[key], ungov[key])):>8}")
    by_source = {s["source"]: s for s in ungov["streams"]}
    for s in gov["streams"]:
        u = by_source.get(s["source"], {})
        for key in ("detections_per_s", "latency_p95_first_ms", "latency_p95_last_ms"):
            name = f"{s['source']} {key.removesuffix('_ms')}"
            print(f"{name:24} {_fmt(s[key]):>12} {_fmt(u.get(key)):>12} {_fmt(ratio(s[key], u.get(key))):>8}")
    for node in sorted(set(gov["dropped"]) | set(ungov["dropped"])):
        g, u = gov["dropped"].get(node), ungov["dropped"].get(node)
        print(f"{'dropped ' + node:24} {_fmt(g):>12} {_fmt(u):>12}")
    print(f"\ntargets (governed; target CPU {target:.2f} of {usable_cores():g} cores):")
    ok = True
    for name, (met, shown) in judge(gov, TARGETS).items():
        ok = ok and met
        baseline = judge(ungov, TARGETS)[name][1]
        print(f"  {'pass' if met else 'FAIL'}  {name:52} {shown:>16}   (ungoverned {baseline})")
    if not governed_real:
        print("WARNING: edgepipe run has no governor flags yet: BOTH runs were ungoverned", file=sys.stderr)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each run (default 40)")
    parser.add_argument("--warmup", type=float, default=10.0, help="left out at the start (default 10)")
    parser.add_argument("--clip", type=Path, help="the camera clip (default: a generated 1080p30 one)")
    parser.add_argument("--keep", type=Path, help="keep each run's results, stderr and samples here")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    if not 0 <= args.warmup < args.seconds:
        parser.error("--warmup must be at least 0 and shorter than --seconds")
    help_text = run_help()
    governed_real = supported(GOVERNED_FLAGS, help_text) and supported(UNGOVERNED_FLAGS, help_text)
    flags = {"governed": GOVERNED_FLAGS, "ungoverned": UNGOVERNED_FLAGS} if governed_real else \
        {"governed": (), "ungoverned": ()}  # fmt: skip
    if not governed_real:
        print(f"WARNING: `edgepipe run` lacks {' '.join(GOVERNED_FLAGS)} / {' '.join(UNGOVERNED_FLAGS)}: "
              "both runs will be ungoverned", file=sys.stderr)  # fmt: skip
    target = headroom_target(GOVERNED_FLAGS)
    clip, lm = args.clip or camera_clip(), tiny_lm()
    cores = usable_cores()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-headroom-"))
    folder.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, Any]] = {}
    try:
        for label in ("governed", "ungoverned"):
            what = f"{label}: {args.seconds:g} s ({args.warmup:g} s warm-up) {' '.join(flags[label])}"
            print(what.rstrip(), file=sys.stderr, flush=True)
            samples, records, stderr = run_pipeline(flags[label], clip, lm, args.seconds, folder, label)
            dropped = parse_dropped(stderr)
            if not dropped:
                print(f"{label}: no --stats summary found on stderr: drops unknown", file=sys.stderr)
            runs[label] = figures(samples, records, dropped, cores=cores, target=target,
                                  warmup_s=args.warmup, seconds=args.seconds)  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"clip {clip} x {TARGETS.cameras} cameras; LM {lm.name}; {cores:g} usable cores")
    ok = report(runs, target, governed_real)
    print(json.dumps({"bench": "headroom", **runs, "target": target, "governor": governed_real, "ok": ok}))
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
