"""Model outputs -> candidate boxes in the input tensor's pixels, one decoder per model family.

=============  ==========================================================================
``centerface``  heatmap [1,1,h,w], scale [1,2,h,w], offset [1,2,h,w], landmarks [1,10,h,w]
                at stride 4; boxes from exp(scale), 5 landmarks per face
``yolov5``      [1, N, 5+C]: cx, cy, w, h, objectness, C class scores
``yolov8``      [1, 4+C, N]: cx, cy, w, h, C class scores (v8, v9, v11 exports)
``yolo-nms``    NMS inside the graph: [1, N, 6] x1, y1, x2, y2, score, class
                or [N, 7] batch, x1, y1, x2, y2, class, score
``ssd``         boxes [1, N, 4], scores [1, N], classes [1, N], optional count [1]
                (TF Object Detection API style: boxes ymin, xmin, ymax, xmax in 0..1)
=============  ==========================================================================

``adapter="auto"`` picks one from the shapes of a first run's outputs (see :func:`guess`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

ADAPTERS = ("centerface", "yolov5", "yolov8", "yolo-nms", "ssd")
BoxFormat = Literal["yxyx_norm", "xyxy_norm", "xyxy"]

DEFAULT_IOU = {"centerface": 0.3, "yolov5": 0.45, "yolov8": 0.45, "yolo-nms": 0.45, "ssd": 0.45}
"""Overlap above which the lower-scored of two same-class boxes is dropped. Faces rarely
overlap, so CenterFace suppresses harder."""

_EMPTY4 = np.empty((0, 4), np.float32)


@dataclass(slots=True)
class Candidates:
    """Boxes before mapping to the source: tensor pixels, ``x1, y1, x2, y2``."""

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    landmarks: np.ndarray | None = None
    """(N, K, 2) points, if the model gives them."""
    suppressed: bool = False
    """NMS already ran (inside the graph)."""

    @classmethod
    def empty(cls) -> Candidates:
        return cls(_EMPTY4, np.empty(0, np.float32), np.empty(0, np.int64))

    def take(self, index: np.ndarray) -> Candidates:
        return Candidates(
            self.boxes[index], self.scores[index], self.class_ids[index],
            None if self.landmarks is None else self.landmarks[index], self.suppressed,
        )  # fmt: skip


class AdapterError(ValueError):
    """The outputs do not have the shapes the adapter reads."""


def guess(names: Sequence[str], shapes: Sequence[tuple[int, ...]]) -> str:
    """The adapter for a model whose first run gave outputs of these shapes.

    Raises :class:`AdapterError` listing the shapes when none fits: the caller names the
    adapter explicitly then.
    """
    if (
        len(shapes) == 4
        and all(len(s) == 4 for s in shapes)
        and sorted(s[1] for s in shapes) == [1, 2, 2, 10]
    ):
        return "centerface"
    if len(shapes) in (3, 4) and any(len(s) == 3 and s[-1] == 4 for s in shapes):
        return "ssd"
    if len(shapes) >= 1:
        shape = shapes[0]
        if len(shape) == 2 and shape[1] == 7:
            return "yolo-nms"
        if len(shape) == 3:
            _, rows, cols = shape
            if rows < cols and rows > 4:
                return "yolov8"  # [1, 4+C, N]: far more anchors than channels
            if cols == 6 and rows <= 1000:
                return "yolo-nms"  # a few hundred final boxes, not tens of thousands of anchors
            if cols > 5:
                return "yolov5"
    listed = ", ".join(f"{n} {list(s)}" for n, s in zip(names, shapes, strict=False))
    raise AdapterError(
        f"cannot tell which detector family gives outputs {listed}: give a model of a family "
        f"edgepipe knows ({', '.join(ADAPTERS)}), or in a pipeline of your own name its family "
        "with Detector(model, adapter=NAME)"
    )


def decode(
    adapter: str,
    outputs: Sequence[np.ndarray],
    names: Sequence[str],
    score_threshold: float,
    input_width: int,
    input_height: int,
    box_format: BoxFormat = "yxyx_norm",
) -> Candidates:
    """Candidates above ``score_threshold`` from one image's outputs (batch size 1)."""
    try:
        if adapter == "centerface":
            return _centerface(outputs, score_threshold)
        if adapter == "yolov5":
            return _yolov5(outputs[0][0], score_threshold)
        if adapter == "yolov8":
            return _yolov8(outputs[0][0], score_threshold)
        if adapter == "yolo-nms":
            return _yolo_nms(outputs[0], score_threshold)
        if adapter == "ssd":
            return _ssd(outputs, names, score_threshold, input_width, input_height, box_format)
    except (IndexError, KeyError, ValueError) as exc:
        shapes = ", ".join(str(list(o.shape)) for o in outputs)
        raise AdapterError(f"adapter '{adapter}' cannot read outputs {shapes}: {exc}") from exc
    raise AdapterError(f"unknown adapter {adapter!r}; use one of {', '.join(ADAPTERS)}")


def _xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    out = np.empty_like(xywh, dtype=np.float32)
    half_w, half_h = xywh[:, 2] / 2, xywh[:, 3] / 2
    out[:, 0] = xywh[:, 0] - half_w
    out[:, 1] = xywh[:, 1] - half_h
    out[:, 2] = xywh[:, 0] + half_w
    out[:, 3] = xywh[:, 1] + half_h
    return out


def _centerface(outputs: Sequence[np.ndarray], threshold: float) -> Candidates:
    by_channels: dict[int, list[np.ndarray]] = {}
    for out in outputs:
        by_channels.setdefault(out.shape[1], []).append(out[0])
    heat = by_channels[1][0][0]
    scale, offset = by_channels[2]  # in the model's output order: scale, then offset
    marks = by_channels[10][0]
    rows, cols = np.nonzero(heat > threshold)
    if rows.size == 0:
        return Candidates.empty()
    stride = 4.0
    height = np.exp(scale[0, rows, cols]) * stride
    width = np.exp(scale[1, rows, cols]) * stride
    cy = (rows + offset[0, rows, cols] + 0.5) * stride
    cx = (cols + offset[1, rows, cols] + 0.5) * stride
    x1, y1 = cx - width / 2, cy - height / 2
    boxes = np.stack([x1, y1, x1 + width, y1 + height], axis=1).astype(np.float32)
    # Landmarks are offsets from the box's top-left corner, in units of the box size; the
    # channels hold (y, x) pairs.
    points = np.empty((rows.size, 5, 2), np.float32)
    points[:, :, 0] = marks[1::2, rows, cols].T * width[:, None] + x1[:, None]
    points[:, :, 1] = marks[0::2, rows, cols].T * height[:, None] + y1[:, None]
    scores = heat[rows, cols].astype(np.float32)
    return Candidates(boxes, scores, np.zeros(rows.size, np.int64), points)


def _yolov5(pred: np.ndarray, threshold: float) -> Candidates:
    pred = pred[pred[:, 4] > threshold]  # objectness first: cheap, and drops most anchors
    if not len(pred):
        return Candidates.empty()
    class_scores = pred[:, 5:] * pred[:, 4:5]
    class_ids = class_scores.argmax(axis=1)
    scores = class_scores[np.arange(len(pred)), class_ids]
    keep = scores > threshold
    return Candidates(_xywh_to_xyxy(pred[keep, :4]), scores[keep].astype(np.float32), class_ids[keep])


def _yolov8(pred: np.ndarray, threshold: float) -> Candidates:
    class_scores = pred[4:]
    class_ids = class_scores.argmax(axis=0)
    scores = class_scores[class_ids, np.arange(pred.shape[1])]
    keep = np.flatnonzero(scores > threshold)
    if not keep.size:
        return Candidates.empty()
    return Candidates(_xywh_to_xyxy(pred[:4, keep].T), scores[keep].astype(np.float32), class_ids[keep])


def _yolo_nms(pred: np.ndarray, threshold: float) -> Candidates:
    if pred.ndim == 3:  # [1, N, 6]: x1, y1, x2, y2, score, class
        rows = pred[0]
        boxes, scores, classes = rows[:, :4], rows[:, 4], rows[:, 5]
    else:  # [N, 7]: batch, x1, y1, x2, y2, class, score
        rows = pred[pred[:, 0] == 0]
        boxes, scores, classes = rows[:, 1:5], rows[:, 6], rows[:, 5]
    keep = scores > threshold
    return Candidates(
        boxes[keep].astype(np.float32),
        scores[keep].astype(np.float32),
        classes[keep].astype(np.int64),
        suppressed=True,
    )


def _ssd(outputs: Sequence[np.ndarray], names: Sequence[str], threshold: float, width: int, height: int,
         box_format: BoxFormat) -> Candidates:  # fmt: skip
    boxes = scores = classes = count = None
    for name, out in zip(names, outputs, strict=True):
        lowered = name.lower()
        if out.ndim == 3 and out.shape[-1] == 4:
            boxes = out[0]
        elif "score" in lowered:
            scores = out.reshape(-1)
        elif "class" in lowered or "label" in lowered:
            classes = out.reshape(-1)
        elif out.size == 1:
            count = int(out.reshape(-1)[0])
    if boxes is None or (scores is None and classes is None):
        raise ValueError("needs a boxes output [1, N, 4] and scores/classes outputs [1, N]")
    if scores is None or classes is None:  # unnamed: scores are the one with values in 0..1
        rest = [o.reshape(-1) for o in outputs if o.ndim == 2]
        if len(rest) != 2:
            raise ValueError("cannot tell the scores output from the classes output; name them")
        a, b = rest
        scores, classes = (
            (a, b) if float(a.max(initial=0)) <= 1.0 and float(b.max(initial=0)) > 1.0 else (b, a)
        )
    n = len(boxes) if count is None else min(count, len(boxes))
    boxes, scores, classes = boxes[:n], scores[:n], classes[:n]
    keep = scores > threshold
    picked = boxes[keep].astype(np.float32)
    if box_format == "yxyx_norm":
        picked = picked[:, [1, 0, 3, 2]] * np.array([width, height, width, height], np.float32)
    elif box_format == "xyxy_norm":
        picked = picked * np.array([width, height, width, height], np.float32)
    return Candidates(
        picked, scores[keep].astype(np.float32), classes[keep].astype(np.int64), suppressed=True
    )
