from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgepipe.infer import SessionConfig
from edgepipe.media.colour import Matrix
from edgepipe.media.frame import from_av, from_rgb
from edgepipe.vision.model import LoadedModel, load_model
from edgepipe.vision.preprocess import Normalize, Prepared, TensorCache
from tests.support.colour_clips import BACKGROUND, PATCH, first_frame, make_colour_clip
from tests.support.onnx_builders import constant_detector

OUTPUTS = {"output0": np.zeros((1, 7, 100), np.float32)}


@pytest.fixture(scope="module")
def free_size(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    path = constant_detector(tmp_path_factory.mktemp("free") / "m.onnx", OUTPUTS, size=64)
    config = SessionConfig(cache_optimized=False, threads=1, free_image_dims=True)
    return load_model(str(path), config)


@pytest.fixture(scope="module")
def fixed_size(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    path = constant_detector(tmp_path_factory.mktemp("fixed") / "m.onnx", OUTPUTS, size=320)
    return load_model(str(path), SessionConfig(cache_optimized=False, threads=1))


def frame(width: int, height: int, value: int = 0) -> Any:
    return from_rgb(np.full((height, width, 3), value, np.uint8))


def test_any_size_model_keeps_the_frames_shape_at_input_size(free_size: LoadedModel) -> None:
    gauges: dict[str, Any] = {}
    cache = TensorCache(free_size, input_size=320, gauges=gauges)
    assert cache.input_format is None
    tensor, box = cache(frame(640, 480))
    assert tensor.shape == (1, 3, 256, 320)  # 320x240, padded to the stride
    assert (box.left, box.top, box.width, box.height) == (0, 0, 320, 240)
    assert gauges["input"] == "320x256"
    small, _ = cache(frame(100, 60))  # never enlarged
    assert small.shape == (1, 3, 64, 128)
    assert cache.input_format is not None
    assert (cache.input_format.width, cache.input_format.height) == (128, 64)
    assert cache.preprocessor(640, 480) is cache.preprocessor(640, 480)


def test_fixed_size_model_letterboxes_in_the_middle(fixed_size: LoadedModel) -> None:
    cache = TensorCache(fixed_size, input_size=640)
    tensor, box = cache(frame(640, 480, value=255))
    assert tensor.shape == (1, 3, 320, 320)
    assert (box.top, box.height) == (40, 240)
    assert tensor[0, 0, 0, 0] == pytest.approx(114 / 255)  # YOLO's grey border
    assert tensor[0, 0, 160, 160] == pytest.approx(1.0, abs=0.01)  # white, through YUV


def test_normalization_the_adapters_default_and_uint8(fixed_size: LoadedModel) -> None:
    assert TensorCache(fixed_size, input_size=640).normalize == Normalize()
    centerface = replace(fixed_size, adapter="centerface")
    assert TensorCache(centerface, input_size=640).normalize == Normalize(scale=1.0)
    raw = replace(fixed_size, dtype=np.uint8)
    given = Normalize(scale=0.5, mean=(1.0, 2.0, 3.0), channels="bgr")
    assert TensorCache(raw, input_size=640, normalize=given).normalize == Normalize(scale=1.0, channels="bgr")


def test_buffers_cover_a_batch_and_sizes_are_bounded(free_size: LoadedModel) -> None:
    assert TensorCache(free_size, input_size=64).buffers == 3
    cache = TensorCache(free_size, input_size=64, batch_size=4)
    assert cache.buffers == 5
    first = cache.preprocessor(64, 64)
    for width in range(66, 66 + 2 * 10, 2):  # a source that keeps changing size
        cache.preprocessor(width, 64)
    assert cache.preprocessor(64, 64) is not first  # forgotten, made again


def test_prepared_holds_the_frame_until_released() -> None:
    f = frame(64, 64)
    prepared = Prepared(f, None, None)
    assert f.refs == 2
    prepared.release()
    assert f.refs == 1


@pytest.mark.parametrize(("matrix", "full_range", "width", "height"),
                         [("bt709", True, 1280, 720), ("bt601", False, 640, 480)])  # fmt: skip
def test_the_detectors_tensor_has_the_clips_colours(
    tmp_path: Path, free_size: LoadedModel, matrix: Matrix, full_range: bool, width: int, height: int
) -> None:
    clip = make_colour_clip(tmp_path / "c.mp4", matrix, full_range, width, height)
    cache = TensorCache(free_size, input_size=320, normalize=Normalize(scale=1.0))
    tensor, box = cache(from_av(first_frame(clip), source_id="clip", seq=0))
    middle = tensor[0, :, box.top + box.height // 2, box.left + box.width // 2]
    np.testing.assert_allclose(middle, PATCH, atol=2)
    np.testing.assert_allclose(tensor[0, :, box.top + 2, box.left + 2], BACKGROUND, atol=2)
