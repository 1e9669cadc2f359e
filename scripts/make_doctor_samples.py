#!/usr/bin/env python3
"""Write media and text files for ``edgepipe doctor`` to look at: healthy ones in OUT/good, and
in OUT/bad the failures it diagnoses, each made the way it happens in the field.

    python scripts/make_doctor_samples.py samples

good/: photo.jpg and photo.png (scikit-image's cat photo, encoded with PyAV's FFmpeg), clip.mp4
(H.264, index at the end), clip-faststart.mp4 (index first), notes.txt (UTF-8 Chinese).
bad/: screenshot.jpg (a PNG with a .jpg name), cut.jpg (the JPEG's first half),
notes-gbk.txt (the notes in GBK), notes-latin1.txt (French notes in Latin-1, as an old Windows
tool saves them), empty.mp4 (zero bytes), clip-cut.mp4 and clip-faststart-cut.mp4 (each MP4's
first half, as a copy that stopped).
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

NOTES = (  # real Simplified Chinese, with its full-width punctuation
    "摄像头 3 号：人脸检测已开启，每秒 15 帧。\n"  # noqa: RUF001
    "夜间模式下画面偏暗，请检查红外补光灯。\n"  # noqa: RUF001
    "录像保存在事件文件夹中，保留七天后自动删除。\n"  # noqa: RUF001
)
NOTES_FRENCH = (  # real French, every character of it in Latin-1
    "Caméra 3 : détection des visages activée, 15 images par seconde.\n"
    "En mode nuit l'image est trop sombre : vérifiez l'éclairage infrarouge.\n"
    "Les vidéos sont gardées sept jours à 20 °C, puis effacées.\n"
)


def photo() -> np.ndarray:
    from skimage import data

    return np.ascontiguousarray(data.chelsea()[:, :450])  # 300x450: even sizes for 4:2:0


def encode_image(rgb: np.ndarray, codec: str) -> bytes:
    """One picture with FFmpeg's own encoder (``mjpeg`` or ``png``)."""
    ctx = av.CodecContext.create(codec, "w")
    ctx.width, ctx.height = rgb.shape[1], rgb.shape[0]
    ctx.pix_fmt = "yuvj420p" if codec == "mjpeg" else "rgb24"
    ctx.time_base = Fraction(1, 25)
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=ctx.pix_fmt)
    return b"".join(bytes(p) for p in [*ctx.encode(frame), *ctx.encode(None)])


def write_clip(path: Path, rgb: np.ndarray, *, faststart: bool, frames: int = 30) -> None:
    """A 1 s H.264 MP4 panning over ``rgb``; ``faststart`` moves the index (moov) to the front."""
    height, width = 240, 320
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), "w", options=options) as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "28"}
        for i in range(frames):
            view = np.ascontiguousarray(rgb[30 : 30 + height, i * 4 : i * 4 + width])
            for packet in stream.encode(av.VideoFrame.from_ndarray(view, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def first_half(source: Path, target: Path) -> None:
    data = source.read_bytes()
    target.write_bytes(data[: len(data) // 2])


def make(out: Path) -> list[Path]:
    good, bad = out / "good", out / "bad"
    good.mkdir(parents=True, exist_ok=True)
    bad.mkdir(parents=True, exist_ok=True)
    rgb = photo()
    (good / "photo.jpg").write_bytes(encode_image(rgb, "mjpeg"))
    (good / "photo.png").write_bytes(encode_image(rgb, "png"))
    write_clip(good / "clip.mp4", rgb, faststart=False)
    write_clip(good / "clip-faststart.mp4", rgb, faststart=True)
    (good / "notes.txt").write_text(NOTES, encoding="utf-8")
    (bad / "screenshot.jpg").write_bytes((good / "photo.png").read_bytes())
    first_half(good / "photo.jpg", bad / "cut.jpg")
    (bad / "notes-gbk.txt").write_bytes(NOTES.encode("gbk"))
    (bad / "notes-latin1.txt").write_bytes(NOTES_FRENCH.encode("latin-1"))
    (bad / "empty.mp4").write_bytes(b"")
    first_half(good / "clip.mp4", bad / "clip-cut.mp4")
    first_half(good / "clip-faststart.mp4", bad / "clip-faststart-cut.mp4")
    return sorted(p for p in out.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write good/ and bad/ into")
    args = parser.parse_args()
    written = make(Path(args.out))
    print(f"wrote {len(written)} files into {args.out}/good and {args.out}/bad", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
