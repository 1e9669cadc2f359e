from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgepipe.media import SYNTHETIC_DEFAULT, parse
from edgepipe.media.frame import from_planes, nv12_views
from edgepipe.media.sources.synthetic import MATRIX, Scene
from edgepipe.vision import Detector
from edgepipe.vision.decoding import DEFAULT_SCORE

FACE_PRIVACY_THRESHOLD = 0.35  # pipelines/face_privacy.py's default --threshold
LAP = range(0, 1200, 75)  # frames along the face's path, two laps across (80 s at 15 fps)


def drawn(scene: Scene, i: int) -> tuple[np.ndarray, np.ndarray]:
    buf = np.empty(scene.width * scene.height * 3 // 2, np.uint8)
    y, uv = nv12_views(buf, scene.width, scene.height)
    scene.draw(i, y, uv)
    return y, uv


@pytest.mark.parametrize("size", [(320, 240), (640, 360), (640, 480), (1280, 720), (1920, 1080)])
@pytest.mark.slow
def test_centerface_finds_the_scenes_face_at_its_default_input_size(
    centerface: Path, size: tuple[int, int]
) -> None:
    width, height = size
    scene = Scene(width, height)
    assert scene.portrait is not None
    # A low threshold shows what the model sees: the face, and nothing else above the defaults.
    detector = Detector("centerface", score_threshold=0.2)
    detector.open()
    for i in LAP:
        y, uv = drawn(scene, i)
        found = detector.process(from_planes(y, uv, seq=i, matrix=MATRIX))
        above = [d for d in found if d.score >= FACE_PRIVACY_THRESHOLD]
        assert len(above) == 1, (i, [(d.box, d.score) for d in found])
        [face] = above
        assert face.score > DEFAULT_SCORE["centerface"] + 0.1, (i, face.score)  # a margin over both defaults
        x0, y0 = scene.portrait_at(i) or (0, 0)
        x1, y1, x2, y2 = face.box
        # The box is the face inside the portrait's oval (hair, neck and collar around it).
        assert x0 <= x1 < x2 <= x0 + scene.portrait.width, (i, face.box, (x0, y0))
        assert y0 <= y1 < y2 <= y0 + scene.portrait.height, (i, face.box, (x0, y0))
        assert x2 - x1 > scene.portrait.width / 4


def test_the_default_camera_is_one_of_those_sizes() -> None:
    src = parse(SYNTHETIC_DEFAULT)
    assert (src.width, src.height) == (640, 480)


def test_the_face_drifts_slowly_and_stays_whole() -> None:
    scene = Scene(640, 480)
    assert scene.portrait is not None
    corners = [scene.portrait_at(i) for i in range(1200)]
    assert all(c is not None for c in corners)
    xs = np.array([c[0] for c in corners if c is not None])
    ys = np.array([c[1] for c in corners if c is not None])
    assert (xs % 2 == 0).all()  # on whole chroma blocks
    assert (ys % 2 == 0).all()
    assert xs.min() >= 0
    assert xs.max() + scene.portrait.width <= 640
    assert ys.min() >= 0
    assert ys.max() + scene.portrait.height <= 480
    steps = np.hypot(np.diff(xs), np.diff(ys))
    assert steps.max() <= 6  # slow: a tracker between model runs keeps up
    assert np.count_nonzero(steps) > 900  # but moving, nearly every frame
    assert xs.max() - xs.min() > 200  # across a good part of the picture
    assert ys.max() - ys.min() > 150


def test_the_face_is_drawn_over_the_square_and_the_disc() -> None:
    scene = Scene(640, 480)
    assert scene.portrait is not None
    for i in LAP:
        y, _ = drawn(scene, i)
        x0, y0 = scene.portrait_at(i) or (0, 0)
        region = y[y0 : y0 + scene.portrait.height, x0 : x0 + scene.portrait.width]
        alone = np.full_like(region, 0)
        uv = np.empty((region.shape[0] // 2, region.shape[1] // 2, 2), np.uint8)
        scene.portrait.draw(alone, uv, 0, 0)
        mask = scene.portrait.mask
        np.testing.assert_array_equal(region[mask], alone[mask])


@pytest.mark.parametrize("size", [(16, 16), (64, 48), (160, 120), (16, 480), (480, 16)])
def test_small_and_narrow_scenes_draw(size: tuple[int, int]) -> None:
    width, height = size
    scene = Scene(width, height)
    for i in range(0, 400, 7):
        drawn(scene, i)  # the portrait, if any, fits at every step (draw raises otherwise)
    if scene.portrait is not None:
        assert scene.portrait.width <= width
        assert scene.portrait.height <= height
