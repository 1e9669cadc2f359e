from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgepipe.infer import SessionConfig
from edgepipe.vision.labels import COCO80
from edgepipe.vision.model import load_model, round_to_stride
from tests.support.onnx_builders import add_model, constant_detector

NO_CACHE = SessionConfig(cache_optimized=False, threads=1)


def yolov8(classes: int) -> dict[str, np.ndarray]:
    return {"output0": np.zeros((1, 4 + classes, 100), np.float32)}  # more anchors than rows


def test_a_fixed_size_nhwc_model_is_read_and_its_adapter_guessed(tmp_path: Path) -> None:
    path = constant_detector(tmp_path / "m.onnx", yolov8(3), size=320, nhwc=True)
    model = load_model(str(path), NO_CACHE)
    assert (model.layout, model.fixed_hw, model.adapter) == ("nhwc", (320, 320), "yolov8")
    assert model.dtype == np.float32
    assert model.batchable is False  # exported with batch 1
    assert model.input_hw((1, 320, 160, 3)) == (320, 160)
    assert model.labels == ()  # 3 classes and no names: labels are the class numbers
    assert model.session.stats.runs == 1  # warmed up


def test_eighty_classes_are_coco_and_given_labels_win(tmp_path: Path) -> None:
    path = constant_detector(tmp_path / "m.onnx", yolov8(80), size=64)
    assert load_model(str(path), NO_CACHE).labels == COCO80
    assert load_model(str(path), NO_CACHE, labels=("a", "b")).labels == ("a", "b")
    assert load_model(str(path), NO_CACHE, adapter="yolov5").adapter == "yolov5"


def test_freed_dims_take_any_size_and_a_batch(tmp_path: Path) -> None:
    path = constant_detector(tmp_path / "m.onnx", yolov8(3), size=64)
    model = load_model(str(path), SessionConfig(cache_optimized=False, threads=1, free_image_dims=True))
    assert (model.layout, model.fixed_hw, model.batchable) == ("nchw", None, True)
    assert model.input_hw((1, 3, 96, 128)) == (96, 128)


def test_an_input_that_is_not_an_image_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"must be an image .* got \[2, 3\]"):
        load_model(str(add_model(tmp_path / "add.onnx")), NO_CACHE)


@pytest.mark.parametrize(("value", "rounded"), [(0, 32), (1, 32), (32, 32), (33, 64), (480.5, 512)])
def test_round_to_stride(value: float, rounded: int) -> None:
    assert round_to_stride(value) == rounded
