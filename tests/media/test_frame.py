from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgepipe.media.colour import Matrix
from edgepipe.media.frame import from_av, from_planes, from_rgb
from tests.support.colour_clips import BACKGROUND, PATCH, first_frame, make_colour_clip, picture, stream_tags

CLIPS = [("bt709", True, 1280, 720), ("bt601", False, 640, 480), ("bt709", False, 1920, 1080),
         ("bt601", True, 640, 360)]  # fmt: skip


@pytest.mark.parametrize(("matrix", "full_range", "width", "height"), CLIPS)
def test_a_tagged_clip_reads_back_as_its_colours(
    tmp_path: Path, matrix: Matrix, full_range: bool, width: int, height: int
) -> None:
    clip = make_colour_clip(tmp_path / "c.mp4", matrix, full_range, width, height)
    # What ffprobe would show: the stream says its matrix and range.
    colorspace, color_range, _, _ = stream_tags(clip)
    assert colorspace == (1 if matrix == "bt709" else 6)
    assert color_range == (2 if full_range else 1)
    frame = from_av(first_frame(clip), source_id="clip", seq=0)
    assert (frame.matrix, frame.full_range) == (matrix, full_range)
    rgb = frame.to_rgb().astype(int)
    np.testing.assert_allclose(rgb[height // 2, width // 2], PATCH, atol=2)
    np.testing.assert_allclose(rgb[4, 4], BACKGROUND, atol=2)


def test_an_untagged_hd_clip_is_read_as_bt709(tmp_path: Path) -> None:
    clip = make_colour_clip(tmp_path / "c.mp4", "bt709", False, 1280, 720, tagged=False)
    assert stream_tags(clip)[:2] == (2, 0)  # unspecified
    frame = from_av(first_frame(clip), source_id="clip", seq=0)
    assert (frame.matrix, frame.full_range) == ("bt709", False)
    np.testing.assert_allclose(frame.to_rgb()[360, 640].astype(int), PATCH, atol=2)


@pytest.mark.parametrize(("matrix", "full_range"), [("bt601", False), ("bt709", True), ("bt709", False)])
def test_from_rgb_and_to_rgb_are_inverse(matrix: Matrix, full_range: bool) -> None:
    rgb = picture(64, 48)
    frame = from_rgb(rgb, matrix=matrix, full_range=full_range)
    assert (frame.matrix, frame.full_range) == (matrix, full_range)
    back = frame.to_rgb().astype(int)
    np.testing.assert_allclose(back[24, 32], PATCH, atol=2)
    np.testing.assert_allclose(back[2, 2], BACKGROUND, atol=2)


def test_frames_without_a_matrix_guess_it_by_size() -> None:
    assert from_rgb(picture(64, 48)).matrix == "bt601"  # from_rgb's default
    hd = from_rgb(picture(1280, 720), matrix="bt709")
    sd = from_rgb(picture(64, 48))
    assert from_planes(hd.y, hd.uv).matrix == "bt709"  # type: ignore[arg-type]
    assert from_planes(sd.y, sd.uv).matrix == "bt601"  # type: ignore[arg-type]
