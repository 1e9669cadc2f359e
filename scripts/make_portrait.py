#!/usr/bin/env python3
"""Write the synthetic camera's portrait: a head-and-shoulders crop of scikit-image's astronaut.

    python scripts/make_portrait.py                    # edgepipe/media/data/astronaut.png
    python scripts/make_portrait.py /tmp/portrait.png  # somewhere else, to compare

The photo is NASA's portrait of Eileen Collins (public domain), shipped in scikit-image's wheel
(a dev dependency: nothing is downloaded). The crop is scaled down with anti-aliasing and saved
as a lossless RGB PNG through PyAV, so the runtime reads it with PyAV alone; the pixels are the
same on every run (tests/media/test_portrait.py checks the shipped file against this script).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import av
import numpy as np

DEFAULT = Path(__file__).resolve().parents[1] / "edgepipe" / "media" / "data" / "astronaut.png"
CROP = (slice(12, 236), slice(128, 324))
"""Rows and columns of the 512x512 photo kept: hair to collar, the face in the middle."""
SIZE = (128, 112)
"""Height and width stored: CenterFace finds the face at this size; the scene scales it."""


def portrait() -> np.ndarray:
    """The crop, (128, 112, 3) RGB uint8."""
    from skimage import data
    from skimage.transform import resize

    crop = data.astronaut()[CROP]
    small = resize(crop, SIZE, anti_aliasing=True, preserve_range=True)
    return np.clip(np.rint(small), 0, 255).astype(np.uint8)


def write_png(path: Path, rgb: np.ndarray) -> None:
    height, width = rgb.shape[:2]
    with av.open(str(path), "w", format="image2") as container:
        stream = container.add_stream("png", rate=1)
        stream.width, stream.height, stream.pix_fmt = width, height, "rgb24"
        stream.options = {"pred": "mixed"}  # the best of PNG's filters per line: the smallest file
        for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", type=Path, default=DEFAULT, help=f"PNG file (default {DEFAULT})")
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_png(args.output, portrait())
    print(f"wrote {args.output} ({SIZE[1]}x{SIZE[0]}, {args.output.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
