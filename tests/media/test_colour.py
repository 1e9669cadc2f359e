from __future__ import annotations

import numpy as np
import pytest

from edgepipe.media.colour import BT601_FULL, BT601_LIMITED, Bt601


def _rgb(k: Bt601, y: float, u: float, v: float) -> tuple[float, float, float]:
    luma = k.y * (y - k.y_black)
    return (
        float(luma + k.rv * (v - 128)),
        float(luma + k.gu * (u - 128) + k.gv * (v - 128)),
        float(luma + k.bu * (u - 128)),
    )


@pytest.mark.parametrize(("k", "black", "white"), [(BT601_LIMITED, 16, 235), (BT601_FULL, 0, 255)])
def test_each_range_maps_its_black_and_white_to_0_and_255_and_neutral_chroma_to_grey(
    k: Bt601, black: int, white: int
) -> None:
    assert _rgb(k, black, 128, 128) == (0.0, 0.0, 0.0)
    assert _rgb(k, white, 128, 128) == pytest.approx((255, 255, 255), abs=0.5)
    r, g, b = _rgb(k, (black + white) / 2, 128, 128)
    assert r == g == b


def test_the_factors_are_float32_as_the_conversions_run() -> None:
    for k in (BT601_LIMITED, BT601_FULL):
        assert {type(f) for f in (k.y, k.rv, k.gu, k.gv, k.bu)} == {np.float32}
