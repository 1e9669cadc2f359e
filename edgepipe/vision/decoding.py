"""One image's model outputs into detections in source pixels.

The adapter (:mod:`edgepipe.vision.adapters`) reads the outputs into candidates above the
score threshold; candidates of unwanted classes go; class-aware NMS thins the rest (unless the
model already did), at most ``max_detections`` stay, best first; the letterbox maps boxes and
landmarks back from tensor to source pixels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgepipe.media.tensor import Letterbox
from edgepipe.vision import adapters
from edgepipe.vision.detection import Detection
from edgepipe.vision.labels import label_for
from edgepipe.vision.model import LoadedModel
from edgepipe.vision.nms import nms

DEFAULT_SCORE = {"centerface": 0.4, "yolov5": 0.25, "yolov8": 0.25, "yolo-nms": 0.25, "ssd": 0.4}
"""Score threshold per adapter when none is given."""


class DetectionDecoder:
    """Outputs -> :class:`Detection` list for one model. Holds no state between calls: any
    thread may call it."""

    def __init__(
        self,
        model: LoadedModel,
        *,
        score_threshold: float | None = None,
        iou_threshold: float | None = None,
        classes: frozenset[str] | None = None,
        max_detections: int = 100,
        box_format: adapters.BoxFormat = "yxyx_norm",
    ) -> None:
        """
        score_threshold, iou_threshold: None takes the adapter's defaults.
        classes: keep only these labels (None: all).
        box_format: how an SSD model's boxes are written (see :func:`adapters.decode`).
        """
        self.model = model
        self.score_threshold = (
            score_threshold if score_threshold is not None else DEFAULT_SCORE[model.adapter]
        )
        self.iou_threshold = (
            iou_threshold if iou_threshold is not None else adapters.DEFAULT_IOU[model.adapter]
        )
        self.classes = classes
        self.max_detections = max_detections
        self.box_format: adapters.BoxFormat = box_format

    def decode(
        self, outputs: Sequence[np.ndarray], input_shape: tuple[int, ...], letterbox: Letterbox
    ) -> list[Detection]:
        """Detections from one image's ``outputs`` (a batch of one), for an input tensor of
        ``input_shape`` into which the source picture went by ``letterbox``. Raises
        :class:`~edgepipe.vision.adapters.AdapterError` for outputs the adapter cannot read."""
        height, width = self.model.input_hw(input_shape)
        found = adapters.decode(
            self.model.adapter, outputs, self.model.session.output_names, self.score_threshold,
            width, height, self.box_format,
        )  # fmt: skip
        if self.classes is not None and len(found.class_ids):
            wanted = [i for i, c in enumerate(found.class_ids) if self.label(int(c)) in self.classes]
            found = found.take(np.asarray(wanted, np.intp))
        if not found.suppressed and len(found.scores):
            found = found.take(
                nms(found.boxes, found.scores, self.iou_threshold, found.class_ids, self.max_detections)
            )
        elif len(found.scores) > self.max_detections:
            found = found.take(np.argsort(-found.scores)[: self.max_detections])
        letterbox.to_source(found.boxes)
        if found.landmarks is not None:
            letterbox.to_source(found.landmarks.reshape(len(found.landmarks), -1))
        return [self._detection(found, i) for i in range(len(found.scores))]

    def label(self, class_id: int) -> str:
        """The label of a class index (``class<N>`` where the model has no name for it)."""
        return label_for(class_id, self.model.labels)

    def _detection(self, found: adapters.Candidates, i: int) -> Detection:
        b = found.boxes[i]
        class_id = int(found.class_ids[i])
        marks = None
        if found.landmarks is not None:
            marks = tuple((float(x), float(y)) for x, y in found.landmarks[i])
        box = (float(b[0]), float(b[1]), float(b[2]), float(b[3]))
        return Detection(box, float(found.scores[i]), class_id, self.label(class_id), marks)
