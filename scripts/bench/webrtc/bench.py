#!/usr/bin/env python3
"""Capture-to-receive latency at real WebRTC viewers in another process, and the server's CPU
per frame with 1 and with 4 viewers, at 720p30.

The server (:mod:`.pipeline`) runs as ``python -m edgepipe run ... --port N`` (so
the PID measured is the pipeline's own): a ``synthetic://1280x720@30`` camera paced like a real
one, a :class:`~edgepipe.serve.webrtc_stream.WebRTCStream` video of it (one shared H.264 encode per
frame however many viewers) and its ``results`` fed by a stage that makes one fixed box a frame
(no model: the figure is about the streaming path, and a detector would take the CPU it
measures). The viewers (:mod:`.viewers`) are real aiortc peers in a second process
(one process holding all of them): ``POST /offer``, aiortc decodes the video, and each decoded
frame is matched by pts (the ``sync`` mapping of :mod:`edgepipe.wire.messages`) to the
``detections`` message of its frame, whose ``t_ms`` is the wall-clock time the frame left the
camera. Latency = wall-clock time the viewer holds the decoded frame - ``t_ms`` (one machine:
one clock). Frames without a message are counted (``frames_unmatched``), not guessed. The
latency includes aiortc's receiver: its jitter buffer hands a frame on only when the next
frame's first packet arrives (it does not read the RTP marker bit, as browsers do), one frame
interval (33 ms) on both paths.

Runs of ``--seconds`` each, counted from ``--warmup`` after every viewer has its first frame:
1 viewer, then 4, each with a fresh server. Over that span the server's CPU (``/proc/PID/stat``
utime + stime) is divided by the frames the camera produced (the ``camera`` node's items out,
read from ``/metrics`` at both ends): ``cpu_ms_per_frame_1`` and ``_4``. Frames handed to the
encoder are reported too (``encoder_frames``: the ``view`` sink's items in). The client's CPU
(it decodes every viewer's video and competes with the server on a small machine) and the rest
of the machine's (``others_cpu_mean``, ``/proc/stat``) are printed so a contaminated run shows
(per run; at the top level of the JSON line, the highest of the runs).

Baselines measured in the same run: for the CPU, the 1-viewer run (``cpu_ratio_4_vs_1``: the
encoder runs once per frame whatever the number of viewers); for the latency, the plain aiortc
path (:mod:`.plain`: the same scene at the same size and rate, a frame track per
viewer that aiortc encodes itself, as its examples do), with 1 and 4 viewers (``plain_1``,
``plain_4``, and ``latency_p99_vs_plain_*``: edgepipe's p99 over the plain path's).

    python -m scripts.bench.webrtc                          # 30 s a run, 5 s warm-up (~3 min)
    python -m scripts.bench.webrtc --seconds 10 --no-plain  # a quicker look, no baseline

What a person sees (``browser``): the viewer page in Debian's headless Chromium
(:mod:`.browser`) watching ``pipelines/face_privacy.py --port N`` on its default
synthetic camera (640x480 at 15 fps, CenterFace on every frame, the video fed from the pixelate
stage): the page's own capture→display figure of every frame shown for ``--browser-seconds``,
beside the pipeline latency of the same frames' results (the baseline: what the page adds to
it is the encode, the network and the browser), and the browser's own share (last packet in to
display), its jitter buffer and its decode time (``getStats``).

    python -m scripts.bench.webrtc --seconds 10 --no-plain --browser-seconds 10

Targets: ``viewers_1.latency_p99_ms`` < 250; ``cpu_ratio_4_vs_1`` < 1.5;
``browser.capture_to_display_p95_ms`` <= ``browser.pipeline_latency_p95_ms`` + 120. Exit 1
when one is missed (a browser run that could not start is a miss, unless ``--no-browser``).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from scripts.bench.child import EXIT_GRACE_S, REPO, edgepipe_run, environ, module, stop
from scripts.bench.headroom.figures import percentile, ratio
from scripts.bench.proc import machine_busy_s, read_proc, usable_cores
from scripts.bench.verdict import print_targets
from scripts.bench.webrtc import browser

TARGET_LATENCY_P99_MS = 250.0
TARGET_CPU_RATIO = 1.5
TARGET_DELIVERED = 0.9
"""Every viewer receives, and matches to a capture time, this share of the frames encoded (a
check on the two targets: a run that lost frames must not pass on the ones that arrived)."""
TARGET_BROWSER_OVER_PIPELINE_MS = 120.0
"""What the page's capture→display p95 may add to the pipeline latency p95 of the same frames."""
VIEWERS = (1, 4)
SOURCE = "synthetic://1280x720@30"
BROWSER_PIPELINE = REPO / "pipelines" / "face_privacy.py"

PIPELINE = Path(__file__).resolve().parent / "pipeline.py"
PLAIN = "scripts.bench.webrtc.plain"
CLIENT = "scripts.bench.webrtc.viewers"
TAIL_S = 2.0
"""The viewers keep receiving this long past the measured span: late messages still match."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env() -> dict[str, str]:
    # Loopback only: ICE gathers 127.0.0.1 on both sides and asks no STUN server.
    env = environ(EDGEPIPE_ICE_HOSTS="127.0.0.1")
    env.pop("EDGEPIPE_ICE_SERVERS", None)
    return env


def edgepipe_frames(url: str) -> tuple[int, int]:
    """(frames the camera produced, frames handed to the encoder) from the server's /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in ("edgepipe_node_items_out_total", "edgepipe_node_items_in_total"):
                counts[(s.name, s.labels.get("node", ""))] = s.value
    return int(counts[("edgepipe_node_items_out_total", "camera")]), int(
        counts[("edgepipe_node_items_in_total", "view")]
    )


def plain_frames(url: str) -> tuple[int, int]:
    """(frames the camera made, frames the viewers' tracks handed to aiortc) from /stats."""
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as response:
        stats = json.loads(response.read())
    return int(stats["frames"]), int(stats["encodes"])


def _cpu(server_pid: int, client_pid: int) -> dict[str, float] | None:
    """CPU seconds so far of the server, the client and the whole machine; None if one is gone."""
    server, client = read_proc(server_pid), read_proc(client_pid)
    if server is None or client is None:
        return None
    return {"server": server[0], "client": client[0], "machine": machine_busy_s()}


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def run_once(path: str, viewers: int, seconds: float, warmup: float, folder: Path) -> dict[str, Any]:
    """One server (``edgepipe`` or ``plain``) and one client process with ``viewers`` peers."""
    label = f"{path}_{viewers}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    long_s = f"{warmup + seconds + TAIL_S + EXIT_GRACE_S:g}"  # stopped by SIGINT well before
    if path == "edgepipe":
        server_cmd = edgepipe_run(PIPELINE, "--port", str(port), "--duration", long_s, "--source", SOURCE)
        frames_of = edgepipe_frames
    else:
        server_cmd = module(PLAIN, "--port", str(port), "--duration", long_s)
        frames_of = plain_frames
    out = folder / f"{label}.json"
    client_cmd = module(CLIENT, url, "--viewers", str(viewers), "--seconds", f"{warmup + seconds + TAIL_S:g}",
                        "--out", str(out))  # fmt: skip
    env = _env()
    with (folder / f"{label}.server.log").open("w") as server_log, \
            (folder / f"{label}.client.log").open("w") as client_log:  # fmt: skip
        started = time.time()
        server = subprocess.Popen(server_cmd, stdout=server_log, stderr=subprocess.STDOUT, env=env)
        client = subprocess.Popen(client_cmd, stdout=subprocess.PIPE, stderr=client_log, env=env, text=True)
        try:
            assert client.stdout is not None
            line = client.stdout.readline()  # "connected <t>"; empty if the client gave up
            if not line.startswith("connected "):
                raise RuntimeError(f"{label}: the viewers never connected (see {folder}/{label}.*.log)")
            connected = float(line.split()[1])
            print(f"{label}: {viewers} viewer(s) connected {connected - started:.1f} s after the start",
                  file=sys.stderr, flush=True)  # fmt: skip
            _sleep_until(connected + warmup)
            frames0 = frames_of(url)  # scraped outside the span: its CPU is not counted
            t0, cpu0 = time.time(), _cpu(server.pid, client.pid)
            _sleep_until(t0 + seconds)
            t1, cpu1 = time.time(), _cpu(server.pid, client.pid)
            frames1 = frames_of(url)
            client.wait(timeout=TAIL_S + EXIT_GRACE_S)
        finally:
            stop(client, f"{label} client")
            stop(server, f"{label} server")
    if client.returncode != 0 or cpu0 is None or cpu1 is None:
        raise RuntimeError(f"{label}: a process ended early (see {folder}/{label}.*.log)")
    cpu = {key: cpu1[key] - cpu0[key] for key in cpu0}
    produced = (frames1[0] - frames0[0], frames1[1] - frames0[1])
    received = json.loads(out.read_text(encoding="utf-8"))
    return figures(received, cpu, produced, t0, t1, usable_cores())


def run_browser(pipeline: Path, seconds: float, warmup: float, folder: Path) -> dict[str, Any]:
    """``pipeline`` served with ``--port`` and its viewer page watched in headless Chromium."""
    if (reason := browser.missing()) is not None:
        raise RuntimeError(f"browser: {reason}")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    duration = f"{warmup + seconds + 2 * EXIT_GRACE_S:g}"
    cmd = edgepipe_run(pipeline, "--port", str(port), "-q", "--duration", duration)
    with (folder / "browser.server.log").open("w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env())
        try:
            deadline = time.time() + EXIT_GRACE_S  # the first run may pull the model
            while True:
                try:
                    urllib.request.urlopen(f"{url}/health", timeout=2).close()
                    break
                except OSError:
                    if server.poll() is not None or time.time() > deadline:
                        raise RuntimeError(  # noqa: B904 (the error is the server's, in its log)
                            f"browser: {pipeline.name} did not serve (see {folder}/browser.server.log)"
                        )
                    time.sleep(0.5)
            seen = browser.watch(f"{url}/", seconds, warmup)
        finally:
            stop(server, "browser server")
    return {"pipeline": f"{pipeline.parent.name}/{pipeline.name}", **seen}


def figures(
    received: dict[str, Any], cpu: dict[str, float], produced: tuple[int, int], t0: float, t1: float,
    cores: float,
) -> dict[str, Any]:  # fmt: skip
    """One run's figures over ``[t0, t1]``: CPU seconds of the server, the client and the whole
    machine over it, frames (camera, encoder) made in it, and what the viewers received; CPU
    means as fractions of ``cores``."""
    span = t1 - t0
    latencies: list[float] = []
    per_viewer: list[int] = []
    unmatched = 0
    for viewer in received["viewers"]:
        inside = [lat for t, lat in viewer["frames"] if t0 <= t <= t1]
        per_viewer.append(len(inside))
        latencies += [lat for lat in inside if lat is not None]
        unmatched += sum(lat is None for lat in inside)
    frames, encoder_frames = produced
    others = max(0.0, cpu["machine"] - cpu["server"] - cpu["client"])
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return {
        "measured_s": round(span, 1),
        "frames": frames,
        "encoder_frames": encoder_frames,
        "cpu_ms_per_frame": round(cpu["server"] * 1e3 / frames, 2) if frames else None,
        "server_cpu_mean": round(cpu["server"] / span / cores, 3),
        "client_cpu_mean": round(cpu["client"] / span / cores, 3),
        "others_cpu_mean": round(others / span / cores, 3),
        "latency_p50_ms": None if p50 is None else round(p50, 1),
        "latency_p99_ms": None if p99 is None else round(p99, 1),
        "frames_per_viewer": per_viewer,
        "frames_unmatched": unmatched,
    }


def delivered(run: dict[str, Any]) -> float | None:
    """The worst viewer's share of the frames encoded that it received and matched to their
    capture time: latency figures over frames that never arrived would flatter the run."""
    per_viewer, encoded = run.get("frames_per_viewer") or [], run.get("encoder_frames") or 0
    if not per_viewer or not encoded:
        return None
    unmatched_share = run.get("frames_unmatched", 0) / sum(per_viewer) if sum(per_viewer) else 1.0
    return round(min(per_viewer) / encoded * (1 - unmatched_share), 3)


def judge(result: dict[str, Any]) -> dict[str, tuple[bool, Any]]:
    """Each target's name -> (met, the figure)."""
    p99, cpu_ratio = result["viewers_1"]["latency_p99_ms"], result["cpu_ratio_4_vs_1"]
    shares = [delivered(result[run]) for run in ("viewers_1", "viewers_4") if run in result]
    worst = None if not shares or None in shares else min(s for s in shares if s is not None)
    met: dict[str, tuple[bool, Any]] = {}
    if "browser" in result:
        seen = result["browser"] or {}
        c2d, pipe = seen.get("capture_to_display_p95_ms"), seen.get("pipeline_latency_p95_ms")
        met[f"browser c2d p95 <= pipeline p95 + {TARGET_BROWSER_OVER_PIPELINE_MS:g}"] = (
            c2d is not None and pipe is not None and c2d <= pipe + TARGET_BROWSER_OVER_PIPELINE_MS,
            c2d,
        )
    return met | {
        f"viewers_1.latency_p99_ms < {TARGET_LATENCY_P99_MS:g}": (
            p99 is not None and p99 < TARGET_LATENCY_P99_MS, p99),
        f"cpu_ratio_4_vs_1 < {TARGET_CPU_RATIO:g}": (cpu_ratio is not None and cpu_ratio < TARGET_CPU_RATIO,
                                                     cpu_ratio),
        f"frames delivered and matched >= {TARGET_DELIVERED:g}": (
            worst is not None and worst >= TARGET_DELIVERED, worst),
    }  # fmt: skip


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return f"{value:.3f}" if isinstance(value, float) and abs(value) < 10 else str(value)


def report(runs: dict[str, dict[str, Any]]) -> None:
    names = list(runs)
    print(f"\n{'':20}" + "".join(f"{n:>20}" for n in names))
    for key in ("measured_s", "frames", "encoder_frames", "cpu_ms_per_frame", "server_cpu_mean",
                "latency_p50_ms", "latency_p99_ms", "frames_per_viewer", "frames_unmatched",
                "client_cpu_mean", "others_cpu_mean"):  # fmt: skip
        print(f"{key:20}" + "".join(f"{_fmt(runs[n][key]):>20}" for n in names))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured span of each run (default 30)")
    parser.add_argument("--warmup", type=float, default=5.0, help="left out after connecting (default 5)")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain aiortc baseline")
    parser.add_argument("--keep", type=Path, help="keep each run's logs and received frames here")
    parser.add_argument("--no-browser", action="store_true", help="skip the viewer page in Chromium")
    parser.add_argument("--browser-seconds", type=float, default=20.0, help="its measured span (default 20)")
    parser.add_argument("--browser-pipeline", type=Path, default=BROWSER_PIPELINE,
                        help="the pipeline it watches (default pipelines/face_privacy.py)")  # fmt: skip
    args = parser.parse_args()
    if args.seconds <= 0 or args.warmup < 0:
        parser.error("--seconds must be positive and --warmup at least 0")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-webrtc-"))
    folder.mkdir(parents=True, exist_ok=True)
    paths = ("edgepipe",) if args.no_plain else ("edgepipe", "plain")
    runs: dict[str, dict[str, Any]] = {}
    try:
        for path in paths:
            for n in VIEWERS:
                print(f"{path}: {n} viewer(s), {args.seconds:g} s after a {args.warmup:g} s warm-up",
                      file=sys.stderr, flush=True)  # fmt: skip
                runs[f"{path}_{n}"] = run_once(path, n, args.seconds, args.warmup, folder)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"bench webrtc: {exc} (logs kept in {folder})", file=sys.stderr)
        return 2
    seen: dict[str, Any] | None = None
    if not args.no_browser:
        print(f"browser: {args.browser_pipeline.name} in headless Chromium, {args.browser_seconds:g} s",
              file=sys.stderr, flush=True)  # fmt: skip
        try:
            seen = run_browser(args.browser_pipeline, args.browser_seconds, args.warmup, folder)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"bench webrtc: {exc} (logs kept in {folder}; --no-browser skips it)", file=sys.stderr)
            args.keep = args.keep or folder
    if args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{SOURCE}; {usable_cores():g} usable cores; server, client and others CPU as fractions of them")
    report(runs)
    one, four = runs["edgepipe_1"], runs["edgepipe_4"]
    result: dict[str, Any] = {
        "bench": "webrtc",
        "source": SOURCE,
        "seconds": args.seconds,
        "warmup": args.warmup,
        "viewers_1": one,
        "viewers_4": four,
        "cpu_ms_per_frame_1": one["cpu_ms_per_frame"],
        "cpu_ms_per_frame_4": four["cpu_ms_per_frame"],
        "cpu_ratio_4_vs_1": ratio(four["cpu_ms_per_frame"], one["cpu_ms_per_frame"]),
        "client_cpu_mean": max(r["client_cpu_mean"] for r in runs.values()),
        "others_cpu_mean": max(r["others_cpu_mean"] for r in runs.values()),
    }
    if not args.no_browser:
        result["browser"] = seen
        if seen:
            print(f"\n{browser.describe(seen)}")
    if not args.no_plain:
        plain_1, plain_4 = runs["plain_1"], runs["plain_4"]
        result |= {
            "plain_1": plain_1,
            "plain_4": plain_4,
            "plain_cpu_ratio_4_vs_1": ratio(plain_4["cpu_ms_per_frame"], plain_1["cpu_ms_per_frame"]),
            "latency_p99_vs_plain_1": ratio(one["latency_p99_ms"], plain_1["latency_p99_ms"]),
            "latency_p99_vs_plain_4": ratio(four["latency_p99_ms"], plain_4["latency_p99_ms"]),
        }
        r = {k: _fmt(v) for k, v in result.items()}
        print(f"\nedgepipe / plain aiortc: latency p99 {r['latency_p99_vs_plain_1']} (1 viewer), "
              f"{r['latency_p99_vs_plain_4']} (4 viewers); CPU 4 vs 1 viewers {r['cpu_ratio_4_vs_1']} "
              f"(plain: {r['plain_cpu_ratio_4_vs_1']})")  # fmt: skip
    ok = print_targets(judge(result), width=36, show=_fmt)
    result |= {"target_latency_p99_ms": TARGET_LATENCY_P99_MS, "target_cpu_ratio": TARGET_CPU_RATIO,
               "target_delivered": TARGET_DELIVERED, "ok": ok,
               "target_browser_over_pipeline_ms": TARGET_BROWSER_OVER_PIPELINE_MS}  # fmt: skip
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
