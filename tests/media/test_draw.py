from __future__ import annotations

import numpy as np
import pytest

from edgepipe.media.colour import Matrix
from edgepipe.media.draw import COLORS, blur_region, draw_box, draw_label, frame_yuv, writable_copy
from edgepipe.media.font import glyph
from edgepipe.media.frame import I420, NV12, Frame, FramePool, from_rgb, nv12_views


def nv12_frame(w: int = 64, h: int = 48, seed: int = 0) -> Frame:
    rng = np.random.default_rng(seed)
    buf = rng.integers(16, 235, size=w * h * 3 // 2, dtype=np.uint8)
    y, uv = nv12_views(buf, w, h)
    return Frame(format=NV12, y=y, uv=uv)


def i420_frame(w: int = 64, h: int = 48, seed: int = 0) -> Frame:
    rng = np.random.default_rng(seed)
    y = rng.integers(16, 235, size=(h, w), dtype=np.uint8)
    u = rng.integers(16, 235, size=(h // 2, w // 2), dtype=np.uint8)
    v = rng.integers(16, 235, size=(h // 2, w // 2), dtype=np.uint8)
    return Frame(format=I420, y=y, u=u, v=v)


def test_box_outline_in_both_layouts() -> None:
    red = (81, 90, 240)  # BT.601 limited range, the frames' matrix (SD)
    for frame in (nv12_frame(), i420_frame()):
        before = frame.y.copy()
        draw_box(frame, (10, 8, 40, 30), COLORS["red"], thickness=2)
        assert (frame.y[8:10, 10:40] == red[0]).all()  # top edge
        assert (frame.y[8:30, 38:40] == red[0]).all()  # right edge
        assert (frame.y[12:26, 14:36] == before[12:26, 14:36]).all()  # inside untouched
        u, v = frame.chroma()
        assert u[4, 5] == red[1]
        assert v[4, 5] == red[2]


@pytest.mark.parametrize(("matrix", "full_range"), [("bt601", False), ("bt601", True), ("bt709", False),
                                                    ("bt709", True)])  # fmt: skip
@pytest.mark.parametrize("name", ["green", "red", "yellow", "blue", "white", "black"])
def test_colours_are_the_same_rgb_whatever_the_frames_matrix_and_range(
    matrix: Matrix, full_range: bool, name: str
) -> None:
    frame = from_rgb(np.full((48, 64, 3), 128, np.uint8), matrix=matrix, full_range=full_range)
    draw_box(frame, (8, 8, 56, 40), COLORS[name], thickness=8)
    assert frame.to_rgb()[12, 32].tolist() == pytest.approx(COLORS[name], abs=2)


def test_box_is_clipped_to_the_frame() -> None:
    frame = nv12_frame()
    draw_box(frame, (-20, -20, 500, 500))
    assert (frame.y[0, :] == frame_yuv(frame, COLORS["green"])[0]).all()
    draw_box(frame, (100, 100, 200, 200))  # entirely outside: nothing, no error


def test_label_draws_its_text() -> None:
    frame = nv12_frame(160, 60)
    draw_label(frame, 10, 40, "FACE 97%", COLORS["yellow"], scale=2)
    tag = frame.y[40 - (7 * 2 + 4) : 40, 10 : 10 + 8 * 12 + 4]
    assert (tag == 16).sum() > 50  # dark ink on the light tag
    assert (tag == frame_yuv(frame, COLORS["yellow"])[0]).sum() > 200
    assert glyph("a").tolist() == glyph("A").tolist()
    assert glyph("\u00e9").sum() == 20  # an unknown character is a hollow box


def test_blur_pixelates_only_the_region() -> None:
    frame = i420_frame(128, 96)
    before = frame.y.copy()
    blur_region(frame, (32, 16, 96, 80))
    inside = frame.y[16:80, 32:96].astype(float)
    assert inside.std() < before[16:80, 32:96].std() / 3
    assert len(np.unique(frame.y[16:24, 32:40])) == 1  # one 8x8 cell, one value
    outside = np.ones_like(before, dtype=bool)
    outside[16:80, 32:96] = False
    assert (frame.y[outside] == before[outside]).all()


@pytest.mark.parametrize("make", [i420_frame, nv12_frame])
def test_writable_copy_keeps_the_layout(make) -> None:  # type: ignore[no-untyped-def]
    # An encoder taking I420 (libx264) would otherwise turn an NV12 copy back, a pass per frame.
    src = make()
    src.y.flags.writeable = False
    copy = writable_copy(src)
    assert copy.format == src.format
    assert (copy.y == src.y).all()
    for mine, theirs in zip(copy.chroma(), src.chroma(), strict=True):
        assert (mine == theirs).all()
    assert (copy.pts, copy.seq, copy.matrix, copy.full_range) == (
        src.pts,
        src.seq,
        src.matrix,
        src.full_range,
    )
    draw_box(copy, (0, 0, 10, 10))  # writable
    assert not (copy.y == src.y).all()


def test_copies_from_a_pool_refill_its_buffers_and_go_back_when_released() -> None:
    pool = FramePool(2, name="copies")
    first = writable_copy(i420_frame(seed=1), pool)
    second = writable_copy(i420_frame(seed=2), pool)
    assert pool.in_use == 2
    third = writable_copy(i420_frame(seed=3), pool)  # none free: a buffer of its own, no wait
    assert pool.in_use == 2
    buffer = first.y.base
    first.release()
    assert pool.in_use == 1
    again = writable_copy(i420_frame(seed=4), pool)
    assert again.y.base is buffer  # the same buffer, refilled
    assert (again.y == i420_frame(seed=4).y).all()
    assert (second.y == i420_frame(seed=2).y).all()  # a held copy is never handed out again
    for frame in (second, third, again):
        frame.release()
    assert pool.in_use == 0
