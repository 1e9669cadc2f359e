"""``synthetic://WxH@FPS``: a moving scene made in-process, the default input of every pipeline.

It behaves as a camera does: frames come at the frame rate whether or not anyone keeps up, in
NV12 straight into the source's pool buffers (no decode, no copy). The scene is a lit gradient
with texture and sensor noise, a square crossing it, a disc bouncing in it and a face drifting
slowly across it (:mod:`edgepipe.media.portrait`, a public-domain photo), so that motion,
drawing, encoding and face detection have something real to work on: a first run of a face
pipeline finds, tracks and pixelates a face. :func:`play` is a synthetic source's decode thread: the
scene at the URL's size and rate.

The scene is drawn in YUV and means BT.601 limited range (an SD camera's colours, whatever the
size): its frames are tagged so, and ``to_rgb``, the detectors and the recorder read them so.
"""

from __future__ import annotations

import math

import numpy as np

from edgepipe.media.colour import Matrix
from edgepipe.media.frame import from_planes, nv12_views
from edgepipe.media.portrait import HEIGHT_FRAC, MIN_HEIGHT_PX, Portrait
from edgepipe.media.sources.outlet import Outlet
from edgepipe.media.sources.pacing import Ticker
from edgepipe.media.url import SourceURL

NOISE_VARIANTS = 8
MATRIX: Matrix = "bt601"
"""What the scene's YUV means (in limited range)."""
DISC_PATH = (0.5, 0.6, 0.3, 0.25)
"""The bouncing disc's path, as shares of the scene's width and height: an ellipse centred at
(0.5, 0.6) of radii 0.3 and 0.25."""


class Scene:
    """Draws frame ``i`` of the scene into an NV12 buffer pair."""

    def __init__(self, width: int, height: int, seed: int = 3) -> None:
        self.width = width
        self.height = height
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
        # A lit wall with a checker texture: gives encoders and detectors edges to work with.
        light = 60 + 120 * (xx / width) * (0.6 + 0.4 * yy / height)
        checker = ((xx // 32 + yy // 32) % 2) * 18
        base = light + checker
        # Noise is baked into a few variants made once: per-frame random numbers would cost more
        # than everything else the source does.
        self._y_variants = [
            np.clip(base + rng.normal(0, 3, size=base.shape), 16, 235).astype(np.uint8)
            for _ in range(NOISE_VARIANTS)
        ]
        cy, cx = np.mgrid[0 : height // 2, 0 : width // 2].astype(np.float32)
        uv = np.empty((height // 2, width // 2, 2), np.uint8)
        uv[:, :, 0] = np.clip(128 + 20 * (cx / (width / 2) - 0.5), 0, 255)
        uv[:, :, 1] = np.clip(128 + 20 * (cy / (height / 2) - 0.5), 0, 255)
        self._uv = uv
        self.side = max(8, min(width, height) // 6) // 2 * 2
        self.radius = max(4, min(width, height) // 10)
        face_height = min(int(height * HEIGHT_FRAC), width)  # a narrow scene: a smaller face
        self.portrait = Portrait(face_height, MATRIX) if face_height >= MIN_HEIGHT_PX else None

    def square_at(self, i: int) -> tuple[int, int]:
        """Top-left corner of the square in frame ``i`` (even, for 4:2:0 chroma)."""
        span = self.width - self.side
        x = (i * 4) % (2 * span)
        x = x if x < span else 2 * span - x
        y = (self.height - self.side) // 3
        return x // 2 * 2, y // 2 * 2

    def disc_at(self, i: int) -> tuple[int, int]:
        x, y, rx, ry = DISC_PATH
        cx = int(self.width * (x + rx * math.cos(i / 23)))
        cy = int(self.height * (y + ry * math.sin(i / 11)))
        return cx, cy

    def portrait_at(self, i: int) -> tuple[int, int] | None:
        """Top-left corner of the portrait in frame ``i`` (even), or None in a scene too small
        for one. It drifts slowly over the left two thirds of the picture (across and back in
        about 40 s at 15 fps, up and down in about 25 s; a few pixels a frame), always whole: a
        face to find and track, never one half out of view."""
        if self.portrait is None:
            return None
        free_x = max(0, self.width * 2 // 3 - self.portrait.width)
        free_y = max(0, self.height - self.portrait.height)
        x = free_x * (0.5 - 0.5 * math.cos(i / 97))
        y = free_y * (0.5 - 0.5 * math.cos(i / 61) * 0.8)
        return int(x) // 2 * 2, int(y) // 2 * 2

    def draw(self, i: int, y: np.ndarray, uv: np.ndarray) -> None:
        """Frame ``i`` into ``y`` (H, W) and ``uv`` (H/2, W/2, 2)."""
        np.copyto(y, self._y_variants[i % NOISE_VARIANTS])
        np.copyto(uv, self._uv)
        x0, y0 = self.square_at(i)
        s = self.side
        y[y0 : y0 + s, x0 : x0 + s] = 225
        uv[y0 // 2 : (y0 + s) // 2, x0 // 2 : (x0 + s) // 2] = (90, 200)  # reddish
        cx, cy = self.disc_at(i)
        r = self.radius
        ys, xs = max(0, cy - r), max(0, cx - r)
        ye, xe = min(self.height, cy + r), min(self.width, cx + r)
        if ye > ys and xe > xs:
            gy, gx = np.ogrid[ys:ye, xs:xe]
            inside = (gy - cy) ** 2 + (gx - cx) ** 2 <= r * r
            y[ys:ye, xs:xe][inside] = 40
            cys, cxs = ys // 2, xs // 2
            cye, cxe = (ye + 1) // 2, (xe + 1) // 2
            cgy, cgx = np.ogrid[cys:cye, cxs:cxe]
            c_inside = (cgy * 2 - cy) ** 2 + (cgx * 2 - cx) ** 2 <= r * r
            uv[cys:cye, cxs:cxe][c_inside] = (170, 100)  # bluish
        at = self.portrait_at(i)
        if self.portrait is not None and at is not None:
            self.portrait.draw(y, uv, *at)  # last: the face is never hidden, so detection is steady


def play(src: SourceURL, outlet: Outlet) -> None:
    """Frames of the scene at ``src``'s size and rate into ``outlet`` until the source stops (a
    synthetic source's decode thread, run by :meth:`Outlet.run`). Raises the memory plan's
    :class:`~edgepipe.planning.memory.MemoryBudgetError` if the pool does not fit."""
    status, pool = outlet.status, outlet.pool
    scene = Scene(src.width, src.height)
    nbytes = src.width * src.height * 3 // 2
    pool.plan(src.width, src.height)
    status.note_decoder("synthetic", "")
    outlet.set_state("live")
    ticker = Ticker(src.fps, outlet.wait)
    i = 0
    while not outlet.stopped:
        status.decoded += 1
        slot = pool.try_acquire()
        if slot is None:
            status.dropped += 1  # consumers hold every frame: skip this one (a camera would)
            status.update_gauges()
        else:
            y, uv = nv12_views(pool.buffer(slot, nbytes), src.width, src.height)
            scene.draw(i, y, uv)
            frame = from_planes(y, uv, source_id=status.source_id, seq=status.decoded, pts=i,
                                time_base=None, pool=pool, slot=slot, matrix=MATRIX,
                                full_range=False)  # fmt: skip
            status.delivered += 1
            status.update_gauges()  # before the frame is out: decoded >= the node's out, always
            if not outlet.post(frame):
                return
        i += 1
        if ticker.tick():
            return
