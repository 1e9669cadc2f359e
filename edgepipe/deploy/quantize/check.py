"""FP32 against INT8 on held-out frames: error per output, detection agreement, latency.

Both models see the same input tensors (made once per frame by the Detector's own
preprocessing) and their outputs go through the Detector's own decoding (adapter, score
threshold, NMS, letterbox back to the frame). A FP32 detection *agrees* when an INT8 detection
of the same class overlaps it by more than ``iou`` (each INT8 box matched once, best overlap
first). Latency is the median of runs taken in turn (FP32, INT8, FP32 ...), so that a busy
machine slows both alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgepipe.media.frame import Frame
from edgepipe.vision.decoding import DetectionDecoder
from edgepipe.vision.detection import Detection
from edgepipe.vision.model import LoadedModel
from edgepipe.vision.nms import iou_matrix
from edgepipe.vision.preprocess import TensorCache

RUN_TIMEOUT_S = 120.0
"""Deadline of one run here: a one-off job on a large model, not live video."""


@dataclass(slots=True)
class OutputError:
    """How far INT8 is from FP32 on one output, over every held-out frame."""

    name: str
    mean_abs: float
    max_abs: float
    fp32_mean_abs: float
    """Mean magnitude of the FP32 output, for scale."""


@dataclass(slots=True)
class Agreement:
    """FP32 detections with an INT8 match."""

    fp32_detections: int
    int8_detections: int
    matched: int
    iou: float

    @property
    def share(self) -> float | None:
        """matched / fp32_detections; None when FP32 found nothing (nothing to agree on)."""
        return self.matched / self.fp32_detections if self.fp32_detections else None


@dataclass(slots=True)
class Check:
    frames: int
    outputs: list[OutputError] = field(default_factory=list)
    agreement: Agreement | None = None
    fp32_ms: float = 0.0
    """Median latency of one run (input tensor ready -> outputs), milliseconds."""
    int8_ms: float = 0.0
    prepared_ms: float | None = None
    """The FP32 model after the quantizer's pre-processing (weights folded, graph optimized):
    what part of the gain is INT8's own."""


def matches(fp32: Sequence[Detection], int8: Sequence[Detection], iou: float) -> int:
    """How many of ``fp32`` have a same-class box in ``int8`` overlapping by more than ``iou``
    (greedy, best overlap first; a box is matched once)."""
    if not fp32 or not int8:
        return 0
    overlap = iou_matrix(
        np.asarray([d.box for d in fp32], np.float64), np.asarray([d.box for d in int8], np.float64)
    )
    same_class = np.asarray([[a.class_id == b.class_id for b in int8] for a in fp32])
    overlap = np.where(same_class, overlap, 0.0)
    fp32_taken = np.zeros(len(fp32), bool)
    int8_taken = np.zeros(len(int8), bool)
    for flat in np.argsort(-overlap, axis=None, kind="stable"):
        i, j = np.unravel_index(flat, overlap.shape)
        if overlap[i, j] <= iou:
            break  # the rest overlap less
        if not (fp32_taken[i] or int8_taken[j]):
            fp32_taken[i] = int8_taken[j] = True
    return int(fp32_taken.sum())


def check(
    fp32: LoadedModel,
    int8: LoadedModel,
    frames: Sequence[Frame],
    tensors: TensorCache,
    *,
    iou: float = 0.5,
    score_threshold: float | None = None,
    runs_per_frame: int = 3,
    prepared: LoadedModel | None = None,
    advance: Callable[[], None] | None = None,
) -> Check:
    """Run both models on ``frames`` (blocking); ``prepared`` (the pre-processed FP32 model) is
    timed too. ``advance`` is called after each frame."""
    decoders = (
        DetectionDecoder(fp32, score_threshold=score_threshold),
        DetectionDecoder(int8, score_threshold=score_threshold),
    )
    name = fp32.session.input(0).name
    names = fp32.session.output_names
    abs_sum = np.zeros(len(names))
    abs_max = np.zeros(len(names))
    ref_sum = np.zeros(len(names))
    count = np.zeros(len(names))
    sides = (fp32, int8) if prepared is None else (fp32, int8, prepared)
    timings: list[list[float]] = [[] for _ in sides]
    found = [0, 0]
    matched = 0
    for frame in frames:
        tensor, letterbox = tensors(frame)
        feeds = {name: tensor}
        outputs = []
        for side, model in enumerate(sides):
            model.session.run(feeds, timeout_s=RUN_TIMEOUT_S)  # warm at this size
            for _ in range(runs_per_frame):
                t0 = time.perf_counter()
                got = model.session.run(feeds, timeout_s=RUN_TIMEOUT_S)
                timings[side].append(time.perf_counter() - t0)
            if side < 2:
                outputs.append(got)
        for k, (a, b) in enumerate(zip(*outputs, strict=True)):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            abs_sum[k] += diff.sum()
            abs_max[k] = max(abs_max[k], float(diff.max(initial=0.0)))
            ref_sum[k] += np.abs(a.astype(np.float64)).sum()
            count[k] += diff.size
        detections = [
            d.decode(out, tensor.shape, letterbox) for d, out in zip(decoders, outputs, strict=True)
        ]
        found[0] += len(detections[0])
        found[1] += len(detections[1])
        matched += matches(detections[0], detections[1], iou)
        if advance is not None:
            advance()
    result = Check(len(frames))
    for k, output_name in enumerate(names):
        n = max(count[k], 1)
        result.outputs.append(OutputError(output_name, abs_sum[k] / n, abs_max[k], ref_sum[k] / n))
    result.agreement = Agreement(found[0], found[1], matched, iou)
    medians = [float(np.median(t) * 1000) if t else 0.0 for t in timings]
    result.fp32_ms, result.int8_ms = medians[0], medians[1]
    result.prepared_ms = medians[2] if prepared is not None else None
    return result
