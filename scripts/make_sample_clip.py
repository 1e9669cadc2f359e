#!/usr/bin/env python3
"""Write a camera-like H.264/H.265 clip: real photos, a slow pan, a moving subject, sensor noise.

The scene is a mosaic of scikit-image's sample photos (shipped in its wheel: nothing is
downloaded). The "camera" pans across it, a cut-out of the astronaut's face and shoulders walks
through the frame, and every frame gets Gaussian sensor noise, so encoders and decoders work as
hard as they do on a real camera's stream, not on a flat test pattern.

    python scripts/make_sample_clip.py out.mp4 --size 1920x1080 --fps 30 --seconds 10
    python scripts/make_sample_clip.py out.h265 --codec hevc --size 640x360 --seconds 3

The container follows the extension (.mp4, .mkv, .ts, or raw .h264 / .h265 / .hevc).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import av
import numpy as np

from edgepipe.core.install import missing

RAW_FORMATS = {".h264": "h264", ".264": "h264", ".h265": "hevc", ".265": "hevc", ".hevc": "hevc"}
ENCODERS = {"h264": "libx264", "hevc": "libx265"}


def _resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize in numpy (no OpenCV needed for a script)."""
    h, w = image.shape[:2]
    ys = np.linspace(0, h - 1, height)
    xs = np.linspace(0, w - 1, width)
    y0 = np.floor(ys).astype(int)
    x0 = np.floor(xs).astype(int)
    y1 = np.minimum(y0 + 1, h - 1)
    x1 = np.minimum(x0 + 1, w - 1)
    wy = (ys - y0)[:, None, None]
    wx = (xs - x0)[None, :, None]
    img = image.astype(np.float32)
    top = img[y0][:, x0] * (1 - wx) + img[y0][:, x1] * wx
    bottom = img[y1][:, x0] * (1 - wx) + img[y1][:, x1] * wx
    return (top * (1 - wy) + bottom * wy).astype(np.uint8)


def _rgb(image: np.ndarray) -> np.ndarray:
    return np.repeat(image[:, :, None], 3, axis=2) if image.ndim == 2 else image[:, :, :3]


def scene(width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mosaic to pan over, subject sprite, subject mask), sized for a ``width`` x ``height`` view."""
    from skimage import data

    photos = [data.coffee(), data.chelsea(), data.rocket(), data.astronaut(), data.camera(), data.cat()]
    tile_h, tile_w = height, width * 2 // 3
    tiles = [_resize(_rgb(p), tile_h, tile_w) for p in photos]
    mosaic = np.concatenate([np.concatenate(tiles[:3], axis=1), np.concatenate(tiles[3:], axis=1)], axis=0)
    astronaut = data.astronaut()[20:300, 120:380]  # face and shoulders
    sprite_h = max(16, height // 3)
    sprite_w = max(16, sprite_h * astronaut.shape[1] // astronaut.shape[0])
    sprite = _resize(astronaut, sprite_h, sprite_w)
    yy, xx = np.mgrid[0:sprite_h, 0:sprite_w]
    mask = (((yy - sprite_h / 2) / (sprite_h / 2)) ** 2 + ((xx - sprite_w / 2) / (sprite_w / 2)) ** 2) <= 1.0
    return mosaic, sprite, mask


def frames(width: int, height: int, count: int, fps: float, seed: int = 1) -> np.ndarray:
    """Yield ``count`` RGB frames (height, width, 3) of the scene (a generator)."""
    mosaic, sprite, mask = scene(width, height)
    rng = np.random.default_rng(seed)
    span_x = mosaic.shape[1] - width
    span_y = mosaic.shape[0] - height
    sh, sw = sprite.shape[:2]
    noise = np.empty((height, width, 3), np.float32)
    for i in range(count):
        t = i / fps
        # The camera pans slowly back and forth, as a PTZ patrol would.
        px = int(span_x * (0.5 - 0.5 * np.cos(t * 0.25)))
        py = int(span_y * (0.5 - 0.5 * np.cos(t * 0.11)))
        view = mosaic[py : py + height, px : px + width].copy()
        # The subject walks across the frame and bobs a little.
        sx = int((width + sw) * ((t * 0.12) % 1.0)) - sw
        sy = int(height / 2 - sh / 2 + height / 10 * np.sin(t * 1.7))
        x0, x1 = max(0, sx), min(width, sx + sw)
        y0, y1 = max(0, sy), min(height, sy + sh)
        if x1 > x0 and y1 > y0:
            m = mask[y0 - sy : y1 - sy, x0 - sx : x1 - sx]
            region = view[y0:y1, x0:x1]
            region[m] = sprite[y0 - sy : y1 - sy, x0 - sx : x1 - sx][m]
        rng.standard_normal(out=noise, dtype=np.float32)
        noisy = view.astype(np.float32) + noise * 3.0
        yield np.clip(noisy, 0, 255).astype(np.uint8)


def make_clip(
    path: str | Path,
    *,
    width: int = 1920,
    height: int = 1080,
    fps: int = 30,
    seconds: float = 10.0,
    codec: str = "h264",
    gop: int | None = None,
    crf: int = 26,
    seed: int = 1,
) -> Path:
    """Write the clip and return its path."""
    path = Path(path)
    if width % 2 or height % 2:
        raise ValueError("width and height must be even (4:2:0 video)")
    suffix = path.suffix.lower()
    raw = RAW_FORMATS.get(suffix)
    if raw is not None:
        codec = raw
    encoder = ENCODERS.get(codec)
    if encoder is None:
        raise ValueError(f"codec {codec!r}: use h264 or hevc")
    count = max(1, round(seconds * fps))
    with av.open(str(path), "w", format=raw) as container:
        stream = container.add_stream(encoder, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "veryfast", "g": str(gop or fps)}
        if encoder == "libx265":
            stream.options["x265-params"] = "log-level=error"
        # PyAV turns the RGB frames into YUV with swscale's default, BT.601 limited range: the
        # stream says so (untagged, an HD clip would be read as BT.709).
        ctx = stream.codec_context
        ctx.colorspace = ctx.color_primaries = ctx.color_trc = 6  # SMPTE 170M: BT.601
        ctx.color_range = 1  # limited (MPEG)
        for rgb in frames(width, height, count, fps, seed):
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def cached_clip(seconds: float = 6.0, width: int = 1920, height: int = 1080, fps: int = 30) -> Path:
    """The benchmarks' sample clip in the temp folder, made on first use."""
    import tempfile

    name = f"edgepipe-bench-{height}p{fps}-{seconds:g}s.mp4" if width == 1920 else \
        f"edgepipe-bench-{width}x{height}@{fps}-{seconds:g}s.mp4"  # fmt: skip
    path = Path(tempfile.gettempdir()) / name
    if not path.exists():
        print(f"making {path} ...", file=sys.stderr)
        make_clip(path, width=width, height=height, fps=fps, seconds=seconds)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="output file (.mp4, .mkv, .ts, .h264, .h265)")
    parser.add_argument("--size", default="1920x1080", help="WxH (default 1920x1080)")
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--codec", choices=sorted(ENCODERS), default="h264")
    parser.add_argument("--gop", type=int, help="keyframe interval in frames (default: one per second)")
    parser.add_argument("--crf", type=int, default=26)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size {args.size!r}: expected WxH, e.g. 1280x720")
    try:
        path = make_clip(args.output, width=width, height=height, fps=args.fps, seconds=args.seconds,
                         codec=args.codec, gop=args.gop, crf=args.crf, seed=args.seed)  # fmt: skip
    except ModuleNotFoundError as exc:  # scikit-image (its photos) comes with the dev extra
        raise SystemExit(missing(exc.name or str(exc), "dev", "scripts/make_sample_clip.py")) from None
    codec = RAW_FORMATS.get(path.suffix.lower(), args.codec)
    print(f"wrote {path} ({width}x{height} @ {args.fps} fps, {args.seconds:g} s, {codec})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
