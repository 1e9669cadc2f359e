"""Detection on video frames: the ``Detector`` node, model output adapters (CenterFace, YOLO,
SSD), class-aware NMS, an IoU tracker, and the ``Detections`` result."""

from __future__ import annotations

from edgepipe.vision.adapters import ADAPTERS, AdapterError, Candidates
from edgepipe.vision.config import DetectorConfig
from edgepipe.vision.detection import Detection, Detections
from edgepipe.vision.detector import Detector, Normalize
from edgepipe.vision.labels import COCO80
from edgepipe.vision.nms import iou_matrix, nms
from edgepipe.vision.overlay import Redact
from edgepipe.vision.tracker import IouTracker

__all__ = [
    "ADAPTERS",
    "COCO80",
    "AdapterError",
    "Candidates",
    "Detection",
    "Detections",
    "Detector",
    "DetectorConfig",
    "IouTracker",
    "Normalize",
    "Redact",
    "iou_matrix",
    "nms",
]
