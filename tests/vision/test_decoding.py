"""Outputs to detections, on outputs written in the test (the model is only there to be read:
its output names, adapter and labels)."""

from __future__ import annotations

import numpy as np
import pytest

from edgepipe.infer import SessionConfig
from edgepipe.media.tensor import Letterbox
from edgepipe.vision import adapters
from edgepipe.vision.decoding import DEFAULT_SCORE, DetectionDecoder
from edgepipe.vision.model import LoadedModel, load_model
from tests.support.onnx_builders import constant_detector

SHAPE = (1, 3, 320, 320)
BOX = Letterbox.fit(640, 480, 320, 320, center=True)  # scale 0.5, 40 px border on top


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    pred = np.zeros((1, 7, 100), np.float32)
    path = constant_detector(tmp_path_factory.mktemp("m") / "m.onnx", {"output0": pred}, size=320)
    return load_model(str(path), SessionConfig(cache_optimized=False, threads=1), labels=("a", "b", "c"))


def outputs(*rows: tuple[float, ...]) -> list[np.ndarray]:
    """YOLOv8 outputs: one anchor per row of (cx, cy, w, h, score of class 0, 1, 2)."""
    pred = np.zeros((1, 7, 100), np.float32)
    for i, row in enumerate(rows):
        pred[0, :, i] = row
    return [pred]


def test_boxes_come_back_in_source_pixels_with_labels(model: LoadedModel) -> None:
    decoder = DetectionDecoder(model)
    (found,) = decoder.decode(outputs((160, 160, 40, 20, 0.0, 0.9, 0.0)), SHAPE, BOX)
    assert (found.label, found.class_id, round(found.score, 3)) == ("b", 1, 0.9)
    assert found.box == pytest.approx((280, 220, 360, 260))
    assert decoder.label(7) == "class7"


def test_thresholds_default_to_the_adapters(model: LoadedModel) -> None:
    decoder = DetectionDecoder(model)
    assert decoder.score_threshold == DEFAULT_SCORE["yolov8"]
    assert decoder.iou_threshold == adapters.DEFAULT_IOU["yolov8"]
    faint = outputs((160, 160, 40, 20, 0.2, 0.0, 0.0))
    assert decoder.decode(faint, SHAPE, BOX) == []
    assert len(DetectionDecoder(model, score_threshold=0.1).decode(faint, SHAPE, BOX)) == 1


def test_only_the_wanted_classes_and_at_most_max_detections(model: LoadedModel) -> None:
    rows = [(40.0 + 50 * i, 160, 20, 20, 0.0, 0.0, 0.0) for i in range(5)]
    rows = [(*r[:4], 0.9 - 0.1 * i, 0.0, 0.5) for i, r in enumerate(rows)]  # class a, and c at 0.5
    decoder = DetectionDecoder(model, classes=frozenset({"a"}), max_detections=3)
    found = decoder.decode(outputs(*rows), SHAPE, BOX)
    assert [d.label for d in found] == ["a"] * 3
    assert [round(d.score, 1) for d in found] == [0.9, 0.8, 0.7]  # the best three
