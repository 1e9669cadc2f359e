"""Non-maximum suppression and box overlap, vectorized in numpy."""

from __future__ import annotations

import numpy as np


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of every box in ``a`` (N, 4) with every box in ``b`` (M, 4),
    boxes as ``x1, y1, x2, y2``: an (N, M) array."""
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    out: np.ndarray = np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0)
    return out


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, class_ids: np.ndarray | None = None,
        max_detections: int = 300) -> np.ndarray:  # fmt: skip
    """Indices of the boxes kept, best score first.

    Greedy: the best box is kept and every box of the *same class* overlapping it by more than
    ``iou_threshold`` is dropped, then the next best survivor, and so on. Class-aware by
    shifting each class's boxes into its own region of the plane (boxes of different classes
    then never overlap), so one pass serves every class.
    """
    if len(boxes) == 0:
        return np.empty(0, np.intp)
    boxes = boxes.astype(np.float32, copy=False)
    if class_ids is not None and len(class_ids):
        span = float(boxes.max() - min(0.0, float(boxes.min())) + 1.0)
        boxes = boxes + (class_ids.astype(np.float32) * span)[:, None]
    order = np.argsort(-scores, kind="stable")
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep: list[int] = []
    while order.size and len(keep) < max_detections:
        best = order[0]
        keep.append(int(best))
        rest = order[1:]
        if not rest.size:
            break
        x1 = np.maximum(boxes[best, 0], boxes[rest, 0])
        y1 = np.maximum(boxes[best, 1], boxes[rest, 1])
        x2 = np.minimum(boxes[best, 2], boxes[rest, 2])
        y2 = np.minimum(boxes[best, 3], boxes[rest, 3])
        inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
        iou = inter / np.maximum(areas[best] + areas[rest] - inter, 1e-9)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, np.intp)
