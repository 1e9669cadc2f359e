"""What a killed recording loses, and what recording so that it loses little costs.

The ``Recorder`` (fragmented MP4, a keyframe at least every second, libx264 ``zerolatency``) is
measured against, in the same run on the same frames (the synthetic camera's scene, with its
sensor noise; frames made before timing starts):

- ``plain``: the recording most programs write: a plain MP4 (its index, ``moov``, written
  at the end), libx264 ``veryfast`` at FFmpeg's defaults (a keyframe every 250 frames, lookahead
  and B-frames). The baseline.
- ``plain, same encoder``: a plain MP4 with the Recorder's encoder settings: what fragmenting
  alone costs.

For each: the file's size (kbit/s of video), the CPU and wall time of the encode and mux calls
(the process's CPU, the encoder's threads included), and what a kill would lose: after every
``--every``-th frame the file is read as a kill would leave it (its bytes at that moment) and
decoded; the loss is the time of the last frame handed to the recorder less the time of the last
frame that decodes (all of it when nothing decodes).

    python -m scripts.bench.recording                      # 640x480, 15 fps, 20 s (~1 min)
    python -m scripts.bench.recording --dir /media/sd      # the syncs on the camera's own disk
    python -m scripts.bench.recording --fps 5              # a slow camera: the encoder's delay in time
    python -m scripts.bench.recording --size 1280x720 --fps 30 --seconds 10 --check

Also the road not taken, ``Recorder without zerolatency``: the same fragments with libx264's
lookahead and B-frames, which hold ~10 frames inside the encoder that a kill loses too. Each
file's quality is printed (the mean luma PSNR against the frames recorded): the encoders' crf
does not mean the same quality with and without ``zerolatency``.

The Recorder syncs each whole fragment to the disk (``fdatasync``, about once a second), so that
a power cut loses what a kill loses: each sync's wall time is measured (on the writer's thread,
where it runs; the file is in ``--dir``, the system's temporary folder by default: a tmpfs
there syncs nothing, so measure on a real disk).

Targets: a kill loses at most a keyframe interval (1 s) and one frame; the recording
costs at most 1.10 x the baseline's CPU and 2.0 x its size at the same crf (a keyframe every
second instead of every 250 frames, and no lookahead: the price of losing one second at most);
the syncs take at most 20 ms of the writer's time per second recorded (2%).
The last line is one JSON object; ``--check`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from edgepipe.media.frame import Frame, from_av, from_planes, nv12_views
from edgepipe.media.recording.file import KEYFRAME_INTERVAL_MS
from edgepipe.media.recording.recorder import Recorder
from edgepipe.media.sources.synthetic import MATRIX, Scene

MAX_LOSS_MS = KEYFRAME_INTERVAL_MS
"""Plus one frame interval."""
MAX_CPU_RATIO = 1.10
MAX_SIZE_RATIO = 2.0
MAX_SYNC_MS_PER_S = 20.0

SYNC_MS: list[float] = []
"""The wall time of every fdatasync made in this process (os.fdatasync is timed in main())."""
_fdatasync = os.fdatasync


def timed_fdatasync(fd: int) -> None:
    t0 = time.perf_counter()
    try:
        _fdatasync(fd)
    finally:
        SYNC_MS.append((time.perf_counter() - t0) * 1000)


def make_frames(width: int, height: int, fps: float, seconds: float) -> list[Frame]:
    scene = Scene(width, height)
    frames = []
    for seq in range(round(fps * seconds)):
        y, uv = nv12_views(np.empty(width * height * 3 // 2, np.uint8), width, height)
        scene.draw(seq, y, uv)
        frame = from_planes(y, uv, matrix=MATRIX, seq=seq)
        frame.t_decoded_ns = round(seq * 1e9 / fps)
        frames.append(frame)
    return frames


class Plain:
    """A plain MP4 written as the Recorder wrote it before (or with ``options``)."""

    def __init__(self, path: Path, fps: float, options: dict[str, str], gop: int | None) -> None:
        self.path, self.fps, self.options, self.gop = path, fps, options, gop
        self.container: Any = None
        self.stream: Any = None

    def process(self, frame: Frame) -> None:
        if self.container is None:
            self.container = av.open(str(self.path), "w")
            self.stream = self.container.add_stream(
                "libx264", rate=Fraction(self.fps).limit_denominator(1000)
            )
            self.stream.width, self.stream.height, self.stream.pix_fmt = frame.width, frame.height, "yuv420p"
            self.stream.time_base = self.stream.codec_context.time_base = Fraction(1, 1000)
            if self.gop is not None:
                self.stream.codec_context.gop_size = self.gop
            self.stream.options = self.options
        av_frame = av.VideoFrame.from_ndarray(
            np.concatenate([frame.y, *[c.reshape(-1, frame.width) for c in frame.chroma()]]), format="yuv420p"
        )
        av_frame.pts, av_frame.time_base = round(frame.t_decoded_ns / 1e6), Fraction(1, 1000)
        self.container.mux(self.stream.encode(av_frame))

    def stop(self) -> None:
        self.container.mux(self.stream.encode(None))
        self.container.close()


def last_decodable_ms(data: bytes) -> float | None:
    if not data:
        return None
    try:
        with av.open(io.BytesIO(data), format="mp4") as container:
            last = None
            for frame in container.decode(video=0):
                last = float(frame.pts * frame.time_base) * 1000
            return last
    except (av.error.FFmpegError, ValueError):
        return None


def psnr_db(path: Path, frames: list[Frame]) -> float:
    """The mean PSNR of the luma of every decoded frame against the frame recorded."""
    values = []
    with av.open(str(path)) as container:
        for decoded, source in zip(container.decode(video=0), frames, strict=False):
            y = from_av(decoded, source_id="bench", seq=0).y.astype(np.float64)
            mse = float(np.mean((y - source.y.astype(np.float64)) ** 2))
            values.append(10 * np.log10(255**2 / max(mse, 1e-9)))
    return float(np.mean(values))


def measure(
    name: str, make: Callable[[Path], Any], frames: list[Frame], fps: float, every: int, folder_in: str | None
) -> dict[str, Any]:
    syncs_before = len(SYNC_MS)
    wall_s = 0.0
    with tempfile.TemporaryDirectory(dir=folder_in) as folder:
        path = Path(folder) / "rec.mp4"
        sink = make(path)
        if hasattr(sink, "start"):
            sink.start()
        cpu_s = 0.0
        losses = []
        for i, frame in enumerate(frames):
            t0, w0 = time.process_time(), time.perf_counter()
            sink.process(frame)
            cpu_s += time.process_time() - t0
            wall_s += time.perf_counter() - w0
            if i >= fps and i % every == 0:  # past the first keyframe interval
                data = path.read_bytes() if path.exists() else b""
                kept = last_decodable_ms(data)
                losses.append(i * 1000 / fps - (kept if kept is not None else -1000 / fps))
        t0, w0 = time.process_time(), time.perf_counter()
        sink.stop()
        cpu_s += time.process_time() - t0
        wall_s += time.perf_counter() - w0
        size = path.stat().st_size
        psnr = psnr_db(path, frames)
    seconds = len(frames) / fps
    syncs = SYNC_MS[syncs_before:]
    row = {
        "name": name,
        "kbit_s": round(size * 8 / 1000 / seconds, 1),
        "psnr_db": round(psnr, 2),
        "cpu_s": round(cpu_s, 3),
        "wall_s": round(wall_s, 3),
        "loss_worst_ms": round(max(losses)),
        "loss_mean_ms": round(sum(losses) / len(losses)),
        "syncs": len(syncs),
        "sync_ms_mean": round(sum(syncs) / len(syncs), 3) if syncs else 0.0,
        "sync_ms_worst": round(max(syncs), 3) if syncs else 0.0,
        "sync_ms_per_s": round(sum(syncs) / seconds, 3),
    }
    synced = (
        f"  {len(syncs)} syncs: mean {row['sync_ms_mean']:.2f} ms, worst {row['sync_ms_worst']:.2f} ms"
        if syncs
        else ""
    )
    print(
        f"{name:30} {row['kbit_s']:7.0f} kbit/s  {psnr:5.2f} dB  cpu {cpu_s:5.2f} s  wall {wall_s:5.2f} s  "
        f"kill loses: worst {row['loss_worst_ms']:5} ms, mean {row['loss_mean_ms']:5} ms{synced}",
        flush=True,
    )
    return row


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="640x480")
    parser.add_argument("--fps", type=float, default=15.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--every", type=int, default=2, help="read the file as a kill leaves it every N frames"
    )
    parser.add_argument(
        "--dir", help="the folder the files are written in (default: the system's temporary one)"
    )
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    os.fdatasync = timed_fdatasync
    width, height = (int(v) for v in args.size.split("x"))
    frames = make_frames(width, height, args.fps, args.seconds)
    from edgepipe.media.recording.recorder import ENCODER_OPTIONS

    same = ENCODER_OPTIONS["libx264"] | {"crf": "23"}
    baseline = measure(
        "plain (before)",
        lambda p: Plain(p, args.fps, {"crf": "23", "preset": "veryfast"}, None),
        frames,
        args.fps,
        args.every,
        args.dir,
    )
    plain_same = measure(
        "plain, same encoder",
        lambda p: Plain(p, args.fps, same, max(1, round(args.fps))),
        frames,
        args.fps,
        args.every,
        args.dir,
    )
    recorder = measure(
        "Recorder (fragmented)", lambda p: Recorder(p, fps=args.fps), frames, args.fps, args.every, args.dir
    )
    lookahead = dict(ENCODER_OPTIONS["libx264"])
    del ENCODER_OPTIONS["libx264"]["tune"]  # the road not taken: the encoder holds ~10 frames
    try:
        delayed = measure(
            "Recorder without zerolatency",
            lambda p: Recorder(p, fps=args.fps),
            frames,
            args.fps,
            args.every,
            args.dir,
        )
    finally:
        ENCODER_OPTIONS["libx264"] = lookahead
    cpu_ratio = recorder["cpu_s"] / baseline["cpu_s"]
    size_ratio = recorder["kbit_s"] / baseline["kbit_s"]
    fragment_ratio = recorder["kbit_s"] / plain_same["kbit_s"]
    max_loss = MAX_LOSS_MS + 1000 / args.fps
    sync_share = recorder["sync_ms_per_s"] / 10  # % of each recorded second
    folder = args.dir or tempfile.gettempdir()
    print(
        f"Recorder's syncs: {recorder['syncs']} fdatasync calls, mean {recorder['sync_ms_mean']:.2f} ms, "
        f"worst {recorder['sync_ms_worst']:.2f} ms: {recorder['sync_ms_per_s']:.2f} ms per second recorded "
        f"({sync_share:.2f}% of the writer's time; target <= {MAX_SYNC_MS_PER_S:.0f} ms), in {folder}"
    )
    print(
        f"Recorder / plain (before): cpu {cpu_ratio:.2f} (target <= {MAX_CPU_RATIO}), size {size_ratio:.2f} "
        f"(target <= {MAX_SIZE_RATIO}); fragmenting alone: size {fragment_ratio:.3f}; a kill loses at worst "
        f"{recorder['loss_worst_ms']} ms (target <= {max_loss:.0f}; before: all of it)"
    )
    ok = (
        cpu_ratio <= MAX_CPU_RATIO
        and size_ratio <= MAX_SIZE_RATIO
        and recorder["loss_worst_ms"] <= max_loss
        and recorder["sync_ms_per_s"] <= MAX_SYNC_MS_PER_S
    )
    print(
        json.dumps(
            {
                "rows": [baseline, plain_same, recorder, delayed],
                "cpu_ratio": round(cpu_ratio, 3),
                "size_ratio": round(size_ratio, 3),
                "fragment_size_ratio": round(fragment_ratio, 3),
                "sync_ms_per_s": recorder["sync_ms_per_s"],
                "dir": folder,
                "ok": ok,
                "size": args.size,
                "fps": args.fps,
                "seconds": args.seconds,
                "cores": os.cpu_count(),
            }
        )
    )
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
