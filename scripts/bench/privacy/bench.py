#!/usr/bin/env python3
"""face_privacy's CPU per frame on a file, against the sum of its parts' bare costs.

The pipeline (``pipelines/face_privacy.py``, the user's flags: ``--input-size 640``) runs as a
subprocess (``python -m edgepipe run``, so the PID measured is the pipeline's own) on a 720p30
clip of a real face (``scripts/make_sample_clip.py``: scikit-image's astronaut walking across a pan of
its sample photos, made once into the temp folder), recording the pixelated video with
``--output``. Its CPU (``/proc/PID/stat`` utime + stime, every thread) is read at each of its
once-a-second log lines (``camera frame N: ...``): the steady figure is the CPU between the
second line and the last over the frames between them (start-up, model load and the first
run at the input size left out); the whole-run figure (``wait4``'s rusage over the recorded
frames) is printed beside it.

Then, in this process, each part alone by the plainest means, with the settings the pipeline
used (:mod:`.parts`):

- ``decode``: a PyAV decode loop over the clip (``thread_type = "AUTO"``, as edgepipe's
  decoder);
- ``model``: the detector's own preprocessing (NV12/I420 -> tensor) + ``session.run`` on an
  ONNX Runtime session loaded with edgepipe's options (``load_session``: intra-op threads
  from the CPU budget, spinning off, the cached optimized graph) + the adapter and NMS, on
  every frame (``--model-every N``: one in N, for a quicker look);
- ``pixelate``: one copy of the decoded frame into an encoder frame (a decoder's frames are
  read-only, so any program copies once) and ``blur_region`` on each box the model loop
  found, grown by ``Redact``'s margin;
- ``encode``: the same encoder as the ``Recorder`` (``pick_encoder``; its fps, crf, preset,
  time base) fed those frames and muxed to an MP4.

The inputs of the model, pixelate and encode loops come from a one-thread decoder whose time
(``time.thread_time`` on this thread) is taken out of the process CPU of the loop, so native
threads (ONNX Runtime's, the encoder's) count where they belong. Each part's CPU per unit is
weighted by the pipeline's units per recorded frame (decoded frames, model runs); the sum is
what the pipeline would cost if it added nothing. A round is one pipeline run and one pass of
the bare loops, back to back; rounds alternate which goes first, and the figures judged are the
medians over the rounds (:mod:`.figures`). Other processes' CPU (``/proc/stat`` less
ours) is printed for the pipeline's window and for the bare loops of each round: on a shared
machine a round whose two halves met different loads is visible as such.

    python -m scripts.bench.privacy                    # 20 s 720p30 clip, 2 rounds (~2.5 min)
    python -m scripts.bench.privacy --rounds 1 --model-every 4      # a quicker look (~1 min)
    python -m scripts.bench.privacy --seconds 40 --rounds 3 --check
    python -m scripts.bench.privacy --peer deface      # also deface on the clip (pip install deface)

Each round also runs the pipeline with ``--instances 1`` (one model call in flight) for its
steady frames/s.

Targets: pipeline CPU per frame <= 1.1 x the sum of its parts, the model's on one intra-op
thread (``cpu_per_frame_over_bare_1thread``); frames/s >= 1.3 x the one-call pipeline's
(``fps_over_one_in_flight``). The last line printed is one JSON
object; ``--check`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.bench.child import REPO, edgepipe_run, environ
from scripts.bench.privacy.figures import (
    TARGET_RATIO,
    Mark,
    Part,
    Round,
    combine,
    model_runs,
    others_cores,
    progress_frame,
    steady,
    verdict,
)
from scripts.bench.privacy.parts import bare_decode, bare_model, bare_pixelate_encode
from scripts.bench.proc import cpu_s as process_cpu_s
from scripts.bench.proc import machine_busy_s

CLIP = {"width": 1280, "height": 720, "fps": 30, "seconds": 20.0}
INPUT_SIZE = 640
THRESHOLD = 0.35
"""face_privacy's default ``--threshold``, passed to it explicitly so that both sides agree."""
EVERY = 1
"""face_privacy's default ``--every``: the model sees every frame."""
TARGET_FPS_OVER_ONE = 1.3
"""Frames/s with the calls in flight the budget chooses over one call in flight."""

PIPELINE = REPO / "pipelines" / "face_privacy.py"
RUN_LIMIT_S = 300.0
"""How long one run of the clip may take in all before it is killed."""
DECODED = re.compile(r"ended \((\d+) frames")


# -- the pipeline, as a subprocess -------------------------------------------------------------


def run_pipeline(clip: Path, output: Path, flags: list[str]) -> dict[str, Any]:
    """Run face_privacy on ``clip``; its marks, whole-run CPU (rusage), decoded frames, stderr."""
    command = edgepipe_run(PIPELINE, "--source", str(clip), "--output", str(output), *flags)
    print("pipeline: " + " ".join(command[1:]), file=sys.stderr, flush=True)
    t0, busy0 = time.monotonic(), machine_busy_s()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=environ(), cwd=REPO)  # fmt: skip
    assert proc.stderr is not None
    marks: list[Mark] = []
    lines: list[str] = []
    for line in proc.stderr:  # one line at a time, as the pipeline logs them
        lines.append(line)
        frame = progress_frame(line)
        if frame is not None:
            cpu_s = process_cpu_s(proc.pid)
            if cpu_s is None:
                break
            marks.append(Mark(frame, cpu_s, machine_busy_s(), time.monotonic()))
        if time.monotonic() - t0 > RUN_LIMIT_S:
            proc.kill()
            break
    lines.extend(proc.stderr)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall_s, busy_s = time.monotonic() - t0, machine_busy_s() - busy0
    stderr = "".join(lines)
    if proc.returncode != 0:
        tail = "\n".join(stderr.splitlines()[-20:])
        raise RuntimeError(f"face_privacy exited {proc.returncode}:\n{tail}")
    decoded = [int(m.group(1)) for m in DECODED.finditer(stderr)]
    cpu_s = usage.ru_utime + usage.ru_stime
    return {"marks": marks, "cpu_s": cpu_s, "wall_s": wall_s, "decoded": decoded[-1] if decoded else None,
            "others_cores": others_cores(busy_s, cpu_s, wall_s), "minor_faults": usage.ru_minflt,
            "stderr": stderr}  # fmt: skip


def recorded_frames(path: Path) -> int:
    """Video frames in the recording (its packets: one per frame)."""
    import av

    with av.open(str(path)) as container:
        return sum(1 for p in container.demux(video=0) if p.size)


def run_peer(command: str, clip: Path, folder: Path, input_size: int) -> dict[str, Any] | None:
    """The same job done by ``deface`` (the same CenterFace model) at the same scale, threshold
    and a mosaic: its whole-run CPU per frame (``wait4``: its ffmpeg children included) and wall
    time; None when ``command`` is not found."""
    import av

    argv = shlex.split(command)
    if not argv or shutil.which(argv[0]) is None:
        print(f"peer {command!r} not found: no peer comparison", file=sys.stderr)
        return None
    with av.open(str(clip)) as container:
        width, height = container.streams.video[0].width, container.streams.video[0].height
    scale = min(1.0, input_size / max(width, height))
    output = folder / "peer.mp4"
    argv += [str(clip), "-o", str(output), "--scale", f"{round(width * scale)}x{round(height * scale)}",
             "--replacewith", "mosaic", "--thresh", str(THRESHOLD)]  # fmt: skip
    print("peer: " + " ".join(argv), file=sys.stderr, flush=True)
    t0, busy0 = time.monotonic(), machine_busy_s()
    quiet = subprocess.DEVNULL
    proc = subprocess.Popen(argv, stdin=quiet, stdout=quiet, stderr=quiet)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall_s, cpu_s = time.monotonic() - t0, usage.ru_utime + usage.ru_stime
    frames = recorded_frames(output) if proc.returncode == 0 and output.is_file() else 0
    if not frames:
        print(f"peer exited {proc.returncode} with no recording: no peer comparison", file=sys.stderr)
        return None
    others = others_cores(machine_busy_s() - busy0, cpu_s, wall_s)
    return {"command": " ".join(argv), "frames": frames, "cpu_ms_per_frame": 1000.0 * cpu_s / frames,
            "wall_s": wall_s, "others_cores": others}  # fmt: skip


def bare_parts(
    clip: Path, input_size: int, model_every: int, folder: Path
) -> tuple[list[Part], float | None]:
    """Each part alone, one after the other: (the parts, other processes' cores meanwhile)."""
    print("bare loops ...", file=sys.stderr, flush=True)
    t0, busy0, cpu0 = time.monotonic(), machine_busy_s(), time.process_time()
    decode = bare_decode(clip)
    model, boxes = bare_model(clip, input_size, THRESHOLD, model_every)  # boxes for the pixelate loop
    pixelate, encode = bare_pixelate_encode(clip, boxes, folder)
    others = others_cores(machine_busy_s() - busy0, time.process_time() - cpu0, time.monotonic() - t0)
    return [decode, model, pixelate, encode], others


def one_round(
    clip: Path, args: argparse.Namespace, folder: Path, bare_first: bool
) -> tuple[Round, dict[str, Any]]:
    """The pipeline, the same with one call in flight, and the bare loops, the bare loops first
    or last as given: the round, and the pipeline's run (its one-call twin under ``one``)."""
    if bare_first:
        bare, others_bare = bare_parts(clip, args.input_size, args.model_every, folder)
    flags = ["--input-size", str(args.input_size), "--threshold", str(THRESHOLD)]
    one = run_pipeline(clip, folder / "one_in_flight.mp4", [*flags, "--instances", "1"])
    one["window"] = steady(one["marks"])
    output = folder / "face_privacy.mp4"
    run = run_pipeline(clip, output, flags)
    run["one"] = one
    (folder / "face_privacy.stderr").write_text(run["stderr"], encoding="utf-8")
    run["recorded"] = recorded = recorded_frames(output)
    run["window"] = window = steady(run["marks"])
    if not bare_first:
        bare, others_bare = bare_parts(clip, args.input_size, args.model_every, folder)
    decoded = run["decoded"] or recorded
    weights = {"decode": decoded / max(1, recorded), "model": model_runs(recorded, EVERY) / max(1, recorded)}
    parts = [Part(p.name, p.cpu_s, p.units, weights.get(p.name, 1.0)) for p in bare]
    pipeline_ms = window["cpu_ms_per_frame"] if window else None
    return Round(pipeline_ms, parts, window["others_cores"] if window else None, others_bare), run


# -- the report --------------------------------------------------------------------------------


def _fps(window: dict[str, float]) -> float | None:
    """Frames a second over a steady window (None without one)."""
    wall = window.get("wall_s")
    return window["frames"] / wall if wall else None


def fps_ratio(run: dict[str, Any]) -> float | None:
    """The pipeline's steady frames/s over its one-call twin's, in one round."""
    fps, one = _fps(run["window"] or {}), _fps(run["one"]["window"] or {})
    return fps / one if fps and one else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clip", type=Path, help="a clip (default: a generated 720p30 one with a face)")
    parser.add_argument("--seconds", type=float, default=CLIP["seconds"], help="length of the generated clip")
    parser.add_argument("--input-size", type=int, default=INPUT_SIZE)
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="pipeline + bare loops, each round in the other order; medians (default 2)",
    )
    parser.add_argument(
        "--model-every",
        type=int,
        default=1,
        help="bare model on one frame in N (default 1: every frame, as the pipeline)",
    )
    parser.add_argument(
        "--peer",
        metavar="COMMAND",
        help="also run this deface command on the clip (e.g. deface), for comparison",
    )
    parser.add_argument("--keep", type=Path, help="keep the recordings and the pipeline's stderr here")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    args = parser.parse_args()
    if args.model_every < 1 or args.rounds < 1:
        parser.error("--model-every and --rounds must be at least 1")
    from scripts.make_sample_clip import cached_clip

    clip = args.clip or cached_clip(args.seconds, int(CLIP["width"]), int(CLIP["height"]), int(CLIP["fps"]))
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-privacy-"))
    folder.mkdir(parents=True, exist_ok=True)
    rounds: list[Round] = []
    runs: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds):
            result, run = one_round(clip, args, folder, bare_first=i % 2 == 1)
            rounds.append(result)
            runs.append(run)
        peer = run_peer(args.peer, clip, folder, args.input_size) if args.peer else None
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    pipeline_ms, parts, value = combine(rounds)
    fps_ratios = [fps_ratio(run) for run in runs]
    fps_over_one = _median([r for r in fps_ratios if r is not None])
    ok = verdict(value) and fps_over_one is not None and fps_over_one >= TARGET_FPS_OVER_ONE
    recorded = runs[-1]["recorded"]
    whole = [1000.0 * r["cpu_s"] / r["recorded"] for r in runs if r["recorded"]]
    faults = [r["minor_faults"] / r["recorded"] for r in runs if r["recorded"]]

    print(f"clip {clip} ({runs[-1]['decoded']} frames decoded, {recorded} recorded), --input-size "
          f"{args.input_size}; {len(rounds)} round(s), medians")  # fmt: skip
    for i, (r, run) in enumerate(zip(rounds, runs, strict=True)):
        w = run["window"] or {}
        print(f"  round {i + 1}: face_privacy {_f(r.pipeline_ms)} CPU-ms/frame steady ({w.get('frames', 0)} "
              f"frames, {_f(w.get('cpu_cores'))} cores), parts {_f(r.parts_ms)}, ratio {_f(r.ratio, 3)}; "
              f"others {_f(r.others_pipeline)} cores during the pipeline, {_f(r.others_bare)} during the "
              "bare loops")  # fmt: skip
    print(f"face_privacy, steady       {_f(pipeline_ms):>8} CPU-ms/frame (between its 2nd progress line and "
          "its last)")  # fmt: skip
    print(f"face_privacy, whole run    {_f(statistics.median(whole)):>8} CPU-ms/frame (start-up included; "
          f"{statistics.median(faults):.0f} minor page faults/frame)")  # fmt: skip
    units = {"decode": "frame", "model": "run", "pixelate": "frame", "encode": "frame"}
    for p in parts:
        unit = units.get(p.name, "unit")
        print(f"  bare {p.name:<9} {p.ms_per_unit:8.2f} CPU-ms/{unit:<5} x {p.per_frame:.3f}/frame "
              f"= {p.ms_per_frame:7.2f} ms/frame")  # fmt: skip
    parts_ms = sum(p.ms_per_frame for p in parts)
    print(f"sum of parts               {parts_ms:8.2f} CPU-ms/frame")
    print(f"ratio pipeline / parts     {_f(value, 3)}x {'meets' if verdict(value) else 'MISSES'} the target "
          f"(<= {TARGET_RATIO}x; the model's parts on one intra-op thread)")  # fmt: skip
    for i, run in enumerate(runs):
        w, w1 = run["window"] or {}, run["one"]["window"] or {}
        one_cpu, one_cores = _f(w1.get("cpu_ms_per_frame")), _f(w1.get("cpu_cores"))
        print(f"  round {i + 1}: {_f(_fps(w))} frames/s steady, {_f(_fps(w1))} with one call in "
              f"flight ({one_cpu} CPU-ms/frame, {one_cores} cores)")  # fmt: skip
    met = fps_over_one is not None and fps_over_one >= TARGET_FPS_OVER_ONE
    print(f"frames/s over one call     {_f(fps_over_one, 3)}x {'meets' if met else 'MISSES'} the target "
          f"(>= {TARGET_FPS_OVER_ONE}x)")  # fmt: skip
    if peer is not None:
        wall_s = statistics.median(r["wall_s"] for r in runs)
        peer["cpu_ratio"] = peer["cpu_ms_per_frame"] / statistics.median(whole)
        peer["speed_ratio"] = peer["wall_s"] / wall_s
        others = _f(peer["others_cores"])
        print(f"peer, whole run            {peer['cpu_ms_per_frame']:8.2f} CPU-ms/frame, "
              f"{peer['wall_s']:.1f} s (face_privacy: {wall_s:.1f} s; others {others} cores)")  # fmt: skip
        print(f"face_privacy does {peer['cpu_ratio']:.2f}x the peer's frames per CPU-second, at "
              f"{peer['speed_ratio']:.2f}x its speed")  # fmt: skip
    print(json.dumps({
        "bench": "privacy",
        "clip": str(clip),
        "input_size": args.input_size,
        "frames_decoded": runs[-1]["decoded"],
        "frames_recorded": recorded,
        "pipeline_cpu_ms_per_frame": _r(pipeline_ms),
        "pipeline_whole_run_cpu_ms_per_frame": round(statistics.median(whole), 2) if whole else None,
        "pipeline_minor_faults_per_frame": round(statistics.median(faults)) if faults else None,
        "parts": {p.name: {"cpu_ms_per_unit": _r(p.ms_per_unit, 3), "units": p.units,
                           "units_per_frame": _r(p.per_frame, 4), "cpu_ms_per_frame": _r(p.ms_per_frame, 3)}
                  for p in parts},
        "sum_of_parts_cpu_ms_per_frame": round(parts_ms, 2),
        "rounds": [{"pipeline_cpu_ms_per_frame": _r(r.pipeline_ms),
                    "sum_of_parts_cpu_ms_per_frame": _r(r.parts_ms), "ratio": _r(r.ratio, 3),
                    "others_cores_pipeline": _r(r.others_pipeline, 3),
                    "others_cores_bare": _r(r.others_bare, 3)} for r in rounds],
        "ratio": _r(value, 3),
        "cpu_per_frame_over_bare_1thread": _r(value, 3),
        "fps": _r(_median([f for r in runs if (f := _fps(r["window"] or {}))])),
        "fps_one_in_flight": _r(_median([f for r in runs if (f := _fps(r["one"]["window"] or {}))])),
        "fps_over_one_in_flight": _r(fps_over_one, 3),
        "target": TARGET_RATIO,
        "target_fps_over_one_in_flight": TARGET_FPS_OVER_ONE,
        "peer": peer and {k: _r(v, 3) if isinstance(v, float) else v for k, v in peer.items()},
        "ok": ok,
    }))  # fmt: skip
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
