from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import skimage.data

from edgepipe.media.colour import Matrix
from edgepipe.media.frame import from_av, from_rgb
from edgepipe.media.tensor import Letterbox, Preprocessor, TensorFormat
from tests.support.colour_clips import BACKGROUND, PATCH, first_frame, make_colour_clip


def av_frame(rgb: np.ndarray):  # type: ignore[no-untyped-def]
    return from_av(av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p"),
                   source_id="t", seq=0)  # fmt: skip


def test_letterbox_geometry_and_mapping_back() -> None:
    box = Letterbox.fit(1920, 1080, 640, 640, center=True)
    assert (box.width, box.height, box.left, box.top) == (640, 360, 0, 140)
    points = np.array([[0.0, 140.0, 640.0, 500.0]], np.float32)
    np.testing.assert_allclose(box.to_source(points), [[0, 0, 1920, 1080]], atol=1e-3)
    corner = Letterbox.fit(640, 480, 640, 480, center=False)
    assert (corner.scale, corner.left, corner.top) == (1.0, 0, 0)


@pytest.mark.parametrize("method", ["numpy", "swscale"])
def test_colours_land_in_the_right_channels(method: str) -> None:
    rgb = np.zeros((64, 96, 3), np.uint8)
    rgb[:, :32] = (220, 20, 20)
    rgb[:, 32:64] = (20, 220, 20)
    rgb[:, 64:] = (20, 20, 220)
    frame = av_frame(rgb) if method == "swscale" else from_rgb(rgb)
    tensor, box = Preprocessor(TensorFormat(48, 32, scale=1.0), method)(frame)  # type: ignore[arg-type]
    assert box.scale == 0.5
    red, green, blue = tensor[0, :, 16, 8], tensor[0, :, 16, 24], tensor[0, :, 16, 40]
    for pixel, channel in ((red, 0), (green, 1), (blue, 2)):
        assert pixel[channel] > 180, (method, pixel)
        assert all(pixel[c] < 60 for c in range(3) if c != channel), (method, pixel)


def test_the_two_paths_agree_on_a_photo() -> None:
    rgb = skimage.data.astronaut()
    fmt = TensorFormat(320, 320, scale=1.0)
    a = Preprocessor(fmt, "numpy")(from_rgb(rgb))[0].copy()
    b = Preprocessor(fmt, "swscale")(av_frame(rgb))[0]
    assert np.abs(a - b).mean() < 6.0  # nearest vs bilinear sampling, both BT.601
    picks = ((np.arange(320) + 0.5) * 512 / 320).astype(int)  # 512 -> 320, nearest pixel
    reference = rgb[picks][:, picks].transpose(2, 0, 1).astype(np.float32)
    assert np.abs(a[0] - reference).mean() < 4.0  # only chroma subsampling and rounding differ


def test_normalization_layout_order_and_border() -> None:
    rgb = np.full((40, 80, 3), (200, 100, 50), np.uint8)
    fmt = TensorFormat(40, 40, layout="nhwc", channels="bgr", scale=1 / 255, mean=(0.5, 0.5, 0.5),
                       std=(0.25, 0.25, 0.25), pad_pixel=114)  # fmt: skip
    tensor, box = Preprocessor(fmt, "numpy")(from_rgb(rgb))
    assert tensor.shape == (1, 40, 40, 3)
    assert (box.top, box.height) == (10, 20)
    inside = tensor[0, 20, 20]
    expected_bgr = (np.array([50, 100, 200]) / 255 - 0.5) / 0.25
    np.testing.assert_allclose(inside, expected_bgr, atol=0.12)
    np.testing.assert_allclose(tensor[0, 0, 0], (114 / 255 - 0.5) / 0.25, atol=1e-5)


def test_uint8_models_take_raw_pixels() -> None:
    rgb = np.full((32, 32, 3), (10, 120, 240), np.uint8)
    tensor, _ = Preprocessor(TensorFormat(32, 32, scale=1.0, dtype=np.uint8), "numpy")(from_rgb(rgb))
    assert tensor.dtype == np.uint8
    assert abs(int(tensor[0, 2, 16, 16]) - 240) <= 4
    with pytest.raises(ValueError, match="uint8 input takes raw pixels"):
        Preprocessor(TensorFormat(32, 32, dtype=np.uint8))


def test_buffers_are_reused_two_in_turn() -> None:
    pre = Preprocessor(TensorFormat(64, 64), "numpy")
    frame = from_rgb(np.zeros((48, 64, 3), np.uint8))
    first, second, third = (pre(frame)[0] for _ in range(3))
    assert first is not second
    assert third is first


def test_swscale_needs_a_decoder_frame_and_auto_is_numpy() -> None:
    with pytest.raises(ValueError, match="no decoder frame"):
        Preprocessor(TensorFormat(32, 32), "swscale")(from_rgb(np.zeros((32, 32, 3), np.uint8)))
    pre = Preprocessor(TensorFormat(32, 32), "auto")
    pre(av_frame(np.zeros((32, 32, 3), np.uint8)))
    assert pre.last_method == "numpy"
    swscale = Preprocessor(TensorFormat(32, 32), "swscale")
    swscale(av_frame(np.zeros((32, 32, 3), np.uint8)))
    assert swscale.last_method == "swscale"


@pytest.mark.parametrize("size", [(320, 320), (256, 256), (300, 200)])  # ratios 1.6, 2 (views), uneven
def test_numpy_path_reads_i420_and_nv12_alike(size: tuple[int, int]) -> None:
    rgb = skimage.data.astronaut()
    fmt = TensorFormat(*size, scale=1.0)
    nv12 = Preprocessor(fmt, "numpy")(from_rgb(rgb))[0].copy()
    i420 = Preprocessor(fmt, "numpy")(av_frame(rgb))[0]
    assert np.abs(nv12 - i420).mean() < 2.0  # two RGB->YUV conversions' rounding apart


def test_full_range_video_is_read_as_full_range() -> None:
    grey = np.full((32, 32, 3), 200, np.uint8)
    jpeg_range = from_av(av.VideoFrame.from_ndarray(grey, format="rgb24").reformat(format="yuvj420p"),
                         source_id="webcam", seq=0)  # fmt: skip
    assert jpeg_range.full_range
    fmt = TensorFormat(16, 16, scale=1.0)
    numpy_path = Preprocessor(fmt, "numpy")(jpeg_range)[0]
    swscale_path = Preprocessor(fmt, "swscale")(jpeg_range)[0]
    np.testing.assert_allclose(numpy_path[0, :, 8, 8], 200, atol=3)  # read as limited range: 214
    np.testing.assert_allclose(swscale_path[0, :, 8, 8], 200, atol=3)


@pytest.mark.parametrize("method", ["numpy", "swscale"])
@pytest.mark.parametrize(
    ("matrix", "full_range", "width", "height", "tagged"),
    [("bt709", True, 1280, 720, True), ("bt601", False, 640, 480, True), ("bt709", False, 1280, 720, False)],
)
def test_a_clip_is_read_in_its_own_matrix_and_range(
    tmp_path: Path, method: str, matrix: Matrix, full_range: bool, width: int, height: int, tagged: bool
) -> None:
    clip = make_colour_clip(tmp_path / "c.mp4", matrix, full_range, width, height, tagged=tagged)
    frame = from_av(first_frame(clip), source_id="clip", seq=0)
    tensor, box = Preprocessor(TensorFormat(320, 320, scale=1.0), method)(frame)  # type: ignore[arg-type]
    middle = tensor[0, :, box.top + box.height // 2, box.left + box.width // 2]
    np.testing.assert_allclose(middle, PATCH, atol=2)
    np.testing.assert_allclose(tensor[0, :, box.top + 2, box.left + 2], BACKGROUND, atol=2)


def test_boxes_map_back_per_axis_on_an_odd_sized_frame() -> None:
    # 1001x563 into 300x300: 300x168.7 rounds to 300x168, so down the picture is squeezed a
    # little more than across; one scale for both would put the bottom edge 2.4 px short.
    box = Letterbox.fit(1001, 563, 300, 300, center=True)
    assert (box.width, box.height) == (300, 168)
    truth = np.array([[0.0, 0.0, 1001.0, 563.0], [100.0, 50.0, 900.5, 500.25]])
    tensor_xy = truth.copy()
    tensor_xy[:, 0::2] = box.left + truth[:, 0::2] * box.width / 1001
    tensor_xy[:, 1::2] = box.top + truth[:, 1::2] * box.height / 563
    np.testing.assert_allclose(box.to_source(tensor_xy), truth, atol=0.5)
    # And the preprocessor puts the picture exactly there: rows above and below are border.
    rgb = np.full((563, 1001, 3), 200, np.uint8)
    frame = av_frame(rgb)
    assert (frame.width, frame.height) == (1001, 563)
    tensor, used = Preprocessor(TensorFormat(300, 300, scale=1.0, pad_pixel=0.0), "numpy")(frame)
    assert used == box
    rows = np.flatnonzero(tensor[0, 1, :, 150] > 100)
    assert (rows[0], rows[-1] + 1) == (box.top, box.top + box.height)
