from __future__ import annotations

import numpy as np
import pytest

from edgepipe.media.colour import (
    BT601_FULL,
    BT601_LIMITED,
    BT709_FULL,
    BT709_LIMITED,
    YCbCr,
    guess_matrix,
    matrix_of,
    ycbcr,
)

ALL = [BT601_LIMITED, BT601_FULL, BT709_LIMITED, BT709_FULL]


def _rgb(k: YCbCr, y: float, u: float, v: float) -> tuple[float, float, float]:
    luma = k.y * (y - k.y_black)
    return (
        float(luma + k.rv * (v - 128)),
        float(luma + k.gu * (u - 128) + k.gv * (v - 128)),
        float(luma + k.bu * (u - 128)),
    )


@pytest.mark.parametrize("k", ALL, ids=lambda k: f"{k.matrix}-{'full' if k.full_range else 'limited'}")
def test_each_set_maps_black_and_white_to_0_and_255_and_neutral_chroma_to_grey(k: YCbCr) -> None:
    assert _rgb(k, k.y_black, 128, 128) == (0.0, 0.0, 0.0)
    assert _rgb(k, k.y_white, 128, 128) == pytest.approx((255, 255, 255), abs=0.01)
    r, g, b = _rgb(k, (k.y_black + k.y_white) / 2, 128, 128)
    assert r == g == b


@pytest.mark.parametrize("k", ALL, ids=lambda k: f"{k.matrix}-{'full' if k.full_range else 'limited'}")
def test_rgb_to_yuv_and_back_is_the_same_colour(k: YCbCr) -> None:
    rng = np.random.default_rng(1)
    for r, g, b in rng.integers(0, 256, size=(50, 3)).astype(float):
        assert _rgb(k, *k.to_yuv(r, g, b)) == pytest.approx((r, g, b), abs=0.01)


# Reference codes of the standards' colour bars (ITU-R BT.601 and BT.709, 8-bit, limited range;
# full range as JPEG/JFIF writes BT.601).
@pytest.mark.parametrize(
    ("k", "rgb", "yuv"),
    [
        (BT601_LIMITED, (255, 0, 0), (81, 90, 240)),
        (BT601_LIMITED, (0, 255, 0), (145, 54, 34)),
        (BT709_LIMITED, (255, 0, 0), (63, 102, 240)),
        (BT709_LIMITED, (0, 255, 0), (173, 42, 26)),
        (BT709_LIMITED, (0, 0, 255), (32, 240, 118)),
        (BT601_FULL, (0, 255, 0), (150, 44, 21)),
    ],
)
def test_known_colours_have_the_standards_codes(
    k: YCbCr, rgb: tuple[int, int, int], yuv: tuple[int, int, int]
) -> None:
    assert k.to_yuv(*map(float, rgb)) == pytest.approx(yuv, abs=0.6)


def test_the_factors_are_float32_as_the_conversions_run() -> None:
    for k in ALL:
        assert {type(f) for f in (k.y, k.rv, k.gu, k.gv, k.bu)} == {np.float32}
        assert ycbcr(k.matrix, k.full_range) is k  # precomputed, looked up


@pytest.mark.parametrize(
    ("size", "matrix"),
    [((640, 480), "bt601"), ((720, 576), "bt601"), ((720, 480), "bt601"), ((1280, 720), "bt709"),
     ((1920, 1080), "bt709"), ((1024, 768), "bt709"), ((1280, 400), "bt709")],
)  # fmt: skip
def test_untagged_video_is_guessed_by_size(size: tuple[int, int], matrix: str) -> None:
    assert guess_matrix(*size) == matrix
    assert matrix_of(2, *size) == matrix  # AVCOL_SPC_UNSPECIFIED


def test_tags_win_over_the_guess() -> None:
    assert matrix_of(1, 640, 480) == "bt709"  # AVCOL_SPC_BT709 on an SD picture
    assert matrix_of(5, 1920, 1080) == "bt601"  # BT470BG
    assert matrix_of(6, 1920, 1080) == "bt601"  # SMPTE170M
    assert matrix_of(9, 1920, 1080) == "bt709"  # BT.2020: not one of ours, the guess
