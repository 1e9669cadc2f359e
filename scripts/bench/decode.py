#!/usr/bin/env python3
"""Frames/s of VideoSource into a sink, against a bare PyAV decode loop and the ffmpeg CLI.

All three decode the same 1080p30 camera-like clip (made by make_sample_clip.py on first use)
in the same run, with the same decoder threading (FFmpeg's automatic frame+slice threads):

- edgepipe: ``VideoSource(clip)`` -> a sink that touches each frame, through the runtime
  (decode thread, pool, channel, node machinery);
- bare PyAV: ``for frame in container.decode(video=0)`` touching each frame, nothing else;
- ffmpeg: ``ffmpeg -i clip -f null -`` (Debian's ffmpeg; a different FFmpeg version than PyAV's,
  so a reference point, not a like-for-like baseline).

    python -m scripts.bench.decode                 # 1080p30, 6 s clip, 3 rounds
    python -m scripts.bench.decode --clip my.mp4

Target: edgepipe >= 0.9x the bare PyAV loop's frames/s.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import av

from edgepipe import Pipeline
from edgepipe.media import Frame, VideoSource
from edgepipe.runner import RunConfig, run_async

TARGET_RATIO = 0.9


def cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def sample_clip(seconds: float) -> Path:
    from scripts.make_sample_clip import cached_clip

    return cached_clip(seconds)


def bare_pyav(clip: Path) -> tuple[float, float, int]:
    t0, c0 = time.perf_counter(), cpu_s()
    n = 0
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            _ = frame.planes[0].line_size  # touch it, as the sink does
            n += 1
    return n / (time.perf_counter() - t0), (cpu_s() - c0) / n, n


def edgepipe_source(clip: Path) -> tuple[float, float, int]:
    count = 0

    def touch(frame: Frame) -> None:
        nonlocal count
        _ = frame.y.shape
        count += 1

    p = Pipeline("bench")
    p.sink("sink", touch, inputs=p.source("video", VideoSource(str(clip), decoder="software")), on_loop=True)
    t0, c0 = time.perf_counter(), cpu_s()
    asyncio.run(run_async(p, RunConfig(governed=False)))
    return count / (time.perf_counter() - t0), (cpu_s() - c0) / count, count


def ffmpeg_cli(clip: Path, frames: int) -> tuple[float, float] | None:
    exe = shutil.which("ffmpeg")
    if exe is None:
        return None
    c0 = cpu_s(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [exe, "-hide_banner", "-loglevel", "error", "-i", str(clip), "-f", "null", "-"], check=True
    )
    return frames / (time.perf_counter() - t0), (cpu_s(resource.RUSAGE_CHILDREN) - c0) / frames


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clip", type=Path, help="a clip to decode (default: a generated 1080p30 one)")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of the generated clip")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    clip = args.clip or sample_clip(args.seconds)
    bare_pyav(clip)  # warm the page cache and the decoder
    ours, bare, cli = [], [], []
    for _ in range(args.rounds):  # alternate, so drift on a shared machine hits both
        bare.append(bare_pyav(clip))
        ours.append(edgepipe_source(clip))
        result = ffmpeg_cli(clip, bare[-1][2])
        if result is not None:
            cli.append(result)
    assert ours[0][2] == bare[0][2], f"edgepipe delivered {ours[0][2]} frames, PyAV decoded {bare[0][2]}"
    fps = statistics.median(r[0] for r in ours)
    bare_fps = statistics.median(r[0] for r in bare)
    cli_fps = statistics.median(r[0] for r in cli) if cli else None
    ratio = fps / bare_fps
    cpu_ms = statistics.median(r[1] for r in ours) * 1e3
    bare_cpu_ms = statistics.median(r[1] for r in bare) * 1e3
    cli_cpu_ms = statistics.median(r[1] for r in cli) * 1e3 if cli else None
    print(f"clip: {clip} ({bare[0][2]} frames)")
    print(f"edgepipe VideoSource  {fps:8.1f} frames/s  {cpu_ms:6.2f} CPU-ms/frame")
    print(f"bare PyAV loop        {bare_fps:8.1f} frames/s  {bare_cpu_ms:6.2f} CPU-ms/frame")
    if cli_fps is not None and cli_cpu_ms is not None:
        print(f"ffmpeg -f null -      {cli_fps:8.1f} frames/s  {cli_cpu_ms:6.2f} CPU-ms/frame")
        print(f"ratio vs ffmpeg CLI {fps / cli_fps:.3f}x")
    verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
    print(f"ratio vs bare PyAV {ratio:.3f}x {verdict} the target of {TARGET_RATIO}x")
    print(
        json.dumps(
            {
                "bench": "decode",
                "clip": str(clip),
                "frames": bare[0][2],
                "frames_per_s": round(fps, 1),
                "bare_pyav_frames_per_s": round(bare_fps, 1),
                "ffmpeg_cli_frames_per_s": round(cli_fps, 1) if cli_fps else None,
                "ratio_vs_bare_pyav": round(ratio, 3),
                "ratio_vs_ffmpeg_cli": round(fps / cli_fps, 3) if cli_fps else None,
                "cpu_ms_per_frame": round(cpu_ms, 3),
                "bare_cpu_ms_per_frame": round(bare_cpu_ms, 3),
                "ffmpeg_cpu_ms_per_frame": round(cli_cpu_ms, 3) if cli_cpu_ms else None,
                "target_ratio": TARGET_RATIO,
            }
        )
    )
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
