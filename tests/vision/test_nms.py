from __future__ import annotations

import numpy as np

from edgepipe.vision.nms import iou_matrix, nms


def test_iou_matrix() -> None:
    a = np.array([[0, 0, 10, 10]], np.float32)
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]], np.float32)
    np.testing.assert_allclose(iou_matrix(a, b), [[1.0, 50 / 150, 0.0]])


def test_same_class_overlaps_are_suppressed_best_first() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], np.float32)
    scores = np.array([0.6, 0.9, 0.5], np.float32)
    assert nms(boxes, scores, 0.5).tolist() == [1, 2]


def test_other_classes_are_never_suppressed() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    classes = np.array([0, 1, 0])
    assert nms(boxes, scores, 0.5, classes).tolist() == [0, 1]


def test_threshold_and_cap() -> None:
    boxes = np.array([[0, 0, 10, 10], [5, 0, 15, 10]], np.float32)  # IoU 1/3
    scores = np.array([0.9, 0.8], np.float32)
    assert nms(boxes, scores, 0.3).tolist() == [0]
    assert nms(boxes, scores, 0.4).tolist() == [0, 1]
    assert nms(boxes, scores, 0.4, max_detections=1).tolist() == [0]
    assert nms(np.empty((0, 4), np.float32), np.empty(0, np.float32), 0.5).size == 0
