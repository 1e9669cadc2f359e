from __future__ import annotations

import tracemalloc
from importlib import resources

import numpy as np
import pytest

from edgepipe.media.frame import from_planes
from edgepipe.media.portrait import PICTURE, Portrait, picture_rgb


def test_the_shipped_picture_is_the_scripts_crop_of_the_public_domain_photo() -> None:
    from scripts import make_portrait

    shipped = picture_rgb()
    assert shipped.shape == (*make_portrait.SIZE, 3)
    made = make_portrait.portrait()  # scikit-image's astronaut (a dev dependency), cropped
    assert np.abs(shipped.astype(int) - made).max() <= 2  # lossless PNG: the script remakes it
    data = resources.files("edgepipe.media").joinpath(PICTURE)
    assert len(data.read_bytes()) < 40_000  # small enough to ship in the wheel
    note = resources.files("edgepipe.media").joinpath("data/README.md").read_text()
    assert "public domain" in note.lower()
    assert "scripts/make_portrait.py" in note


def blank(width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((height, width), 7, np.uint8), np.full((height // 2, width // 2, 2), 9, np.uint8)


def test_the_portrait_is_drawn_inside_its_oval_only() -> None:
    portrait = Portrait(145)  # rounded down to even, the width after the picture's aspect
    assert (portrait.height, portrait.width) == (144, 126)
    y, uv = blank(200, 180)
    portrait.draw(y, uv, 10, 20)
    inside = np.zeros(y.shape, bool)
    inside[20:164, 10:136] = portrait.mask
    assert (y[~inside] == 7).all()  # the scene around it untouched, corners of its box included
    assert (y[inside] >= 16).all()  # limited-range luma wherever the face is
    assert portrait.mask.mean() > 0.7  # an oval filling its box
    chroma_inside = np.zeros(uv.shape[:2], bool)
    chroma_inside[10:82, 5:68] = True
    assert (uv[~chroma_inside] == 9).all()
    assert (uv[chroma_inside] != 9).mean() > 0.7


def test_the_portrait_keeps_its_colours_in_bt601_limited_range() -> None:
    portrait = Portrait(128)  # the picture's own size: no scaling to blur the comparison
    y, uv = blank(112, 128)
    portrait.draw(y, uv, 0, 0)
    rgb = from_planes(y, uv, matrix="bt601", full_range=False).to_rgb()
    mask = portrait.mask
    seen = rgb[mask].astype(float).mean(axis=0)
    original = picture_rgb()[mask].astype(float).mean(axis=0)
    np.testing.assert_allclose(seen, original, atol=3)  # a range or matrix mix-up is off by 10+


def test_a_portrait_that_does_not_fit_is_refused() -> None:
    portrait = Portrait(40)
    y, uv = blank(64, 48)
    with pytest.raises(ValueError, match=r"a 36x40 portrait does not fit at \(30, 10\) in 64x48"):
        portrait.draw(y, uv, 30, 10)
    with pytest.raises(ValueError, match="does not fit"):
        portrait.draw(y, uv, 1, 0)  # odd: it would split the 2x2 chroma blocks
    portrait.draw(y, uv, 28, 8)  # flush with the corner: fits


def test_drawing_allocates_nothing_the_size_of_the_portrait() -> None:
    portrait = Portrait(1000)  # 876x1000: a temporary of its size would be 0.8 MB and more
    y, uv = blank(1920, 1080)
    portrait.draw(y, uv, 100, 40)  # warm-up
    tracemalloc.start()
    try:
        for x in range(0, 200, 20):
            portrait.draw(y, uv, x, 40)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64_000  # views and in-place ufuncs only (numpy's iterator keeps ~17 kB buffers)
