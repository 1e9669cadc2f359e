"""The built-in demo: a synthetic camera, a motion detector, and a log of what it saw.

Needs nothing but edgepipe itself: no camera, no model, no download. Try::

    edgepipe run pipelines/demo.py --duration 10 --stats
    edgepipe run pipelines/demo.py --fps 30 --results -

The camera is a noisy grey scene with a bright square moving across it, paced to ``fps``. The
detector compares each frame with the previous one and reports the box around what moved. The
camera's channel keeps only the latest frames, so a slow detector skips frames instead of
falling behind (the drops show in ``--stats``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from edgepipe import Message, Pipeline

log = logging.getLogger("demo")


@dataclass(frozen=True, slots=True)
class GrayFrame:
    """One greyscale frame (the video issue brings real NV12 frames)."""

    seq: int
    t_capture_ns: int
    pixels: np.ndarray


def synthetic_camera(width: int, height: int, fps: float, frames: int) -> AsyncIterator[GrayFrame]:
    """A live-like source: paced to ``fps`` on the loop's clock; ``frames=0`` runs forever."""

    async def frames_gen() -> AsyncIterator[GrayFrame]:
        rng = np.random.default_rng(7)
        # A few noise fields made once and cycled: per-frame random numbers would cost more than
        # the detector does.
        noise = rng.integers(90, 110, size=(4, height, width), dtype=np.uint8)
        side = max(8, min(width, height) // 6)
        loop = asyncio.get_running_loop()
        t_next = loop.time()
        seq = 0
        while frames == 0 or seq < frames:
            pixels = noise[seq % len(noise)].copy()
            x = int((seq * 4) % (width - side))
            y = int((height - side) / 2 * (1 + np.sin(seq / 15)))
            pixels[y : y + side, x : x + side] = 230
            yield GrayFrame(seq, time.monotonic_ns(), pixels)
            seq += 1
            t_next += 1.0 / fps
            await asyncio.sleep(max(0.0, t_next - loop.time()))

    return frames_gen()


class MotionDetector:
    """Boxes what changed since the previous frame. Runs on a worker thread (plain numpy)."""

    def __init__(self, threshold: int, min_pixels: int) -> None:
        self.threshold = threshold
        self.min_pixels = min_pixels
        self._previous: np.ndarray | None = None
        self._diff: np.ndarray | None = None

    def process(self, frame: GrayFrame) -> Message | None:
        current = frame.pixels.astype(np.int16)
        previous, self._previous = self._previous, current
        if previous is None:
            return None
        if self._diff is None or self._diff.shape != current.shape:
            self._diff = np.empty_like(current)
        np.subtract(current, previous, out=self._diff)
        np.abs(self._diff, out=self._diff)
        moved = self._diff > self.threshold
        count = int(moved.sum())
        if count < self.min_pixels:
            return None
        rows = np.flatnonzero(moved.any(axis=1))
        cols = np.flatnonzero(moved.any(axis=0))
        box = [int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1]
        latency_ms = (time.monotonic_ns() - frame.t_capture_ns) / 1e6
        return Message(
            "motion", {"frame": frame.seq, "box_xyxy": box, "pixels": count, "latency_ms": latency_ms}
        )


async def log_motion(message: Message) -> None:
    data = message.data
    if data["frame"] % 15 == 0:  # one line in fifteen: the log is for people
        log.info("frame %d: motion at %s (%d px)", data["frame"], data["box_xyxy"], data["pixels"])


def pipeline(
    fps: float = 15.0,
    width: int = 320,
    height: int = 240,
    frames: int = 0,
    threshold: int = 40,
) -> Pipeline:
    """Synthetic camera -> motion detector -> log. ``frames=0`` runs until stopped."""
    p = Pipeline("demo")
    camera = p.source("camera", synthetic_camera(width, height, fps, frames), on_error="stop")
    motion = p.stage(
        "motion",
        MotionDetector(threshold, min_pixels=16),
        inputs=camera,
        policy="latest",
        queue_size=2,
        timeout_s=1.0,
    )
    p.sink("log", log_motion, inputs=motion)
    return p
