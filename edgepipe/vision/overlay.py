"""Stages that draw detections onto their frame: :class:`Redact` (pixelate, for privacy) and
:class:`Annotate` (boxes and labels). Both take :class:`Detections` that carry their frame
(``Detector(keep_frame=True)``), copy the frame once (decoder frames are read-only) and return
the copy, ready for a :class:`~edgepipe.media.recording.recorder.Recorder` or a video track. The copies are
made into a small pool of buffers, refilled as the frames downstream are released."""

from __future__ import annotations

from edgepipe.media.draw import COLORS, Color, blur_region, draw_box, draw_label, writable_copy
from edgepipe.media.frame import Frame, FramePool
from edgepipe.vision.detection import Detections

COPIES = 16
"""Buffers kept for a stage's copies: more than a recorder's queue, a viewer's and the frames in
hand hold at once. A copy made while every one is held gets a new buffer, as without a pool."""


def _frame_of(detections: Detections) -> Frame:
    if detections.frame is None:
        raise ValueError(
            f"detections of {detections.source_id}#{detections.seq} carry no frame: "
            "declare the detector with Detector(..., keep_frame=True)"
        )
    return detections.frame


class Redact:
    """Pixelates every detected box, grown by ``margin`` (a fraction of its size) so that hair
    and ears go too; boxes the tracker predicted between model runs (``Detections.inferred``
    false) by ``predicted_margin``, since a face may have moved off the prediction. Runs on a
    worker thread."""

    def __init__(
        self, margin: float = 0.15, labels: frozenset[str] | None = None, predicted_margin: float = 0.35
    ) -> None:
        if not 0 <= margin <= 10 or not 0 <= predicted_margin <= 10:
            raise ValueError(
                f"margins are fractions of a box's size in [0, 10], not {margin}, {predicted_margin}"
            )
        self.margin = margin
        self.predicted_margin = max(margin, predicted_margin)
        self.labels = labels
        """Only these labels (None: every detection)."""
        self._copies = FramePool(COPIES, name="redact copies")

    def process(self, detections: Detections) -> Frame:
        frame = writable_copy(_frame_of(detections), self._copies)
        margin = self.margin if detections.inferred else self.predicted_margin
        for det in detections.items:
            if self.labels is not None and det.label not in self.labels:
                continue
            x1, y1, x2, y2 = det.box
            dx, dy = (x2 - x1) * margin, (y2 - y1) * margin
            blur_region(frame, (x1 - dx, y1 - dy, x2 + dx, y2 + dy))
        return frame


class Annotate:
    """Draws each box with its label (and track id, score)."""

    def __init__(self, color: Color = COLORS["green"], show_score: bool = True) -> None:
        self.color = color
        self.show_score = show_score
        self._copies = FramePool(COPIES, name="annotate copies")

    def process(self, detections: Detections) -> Frame:
        frame = writable_copy(_frame_of(detections), self._copies)
        for det in detections.items:
            draw_box(frame, det.box, self.color)
            text = det.label.upper()
            if det.track_id is not None:
                text += f" {det.track_id}"
            if self.show_score:
                text += f" {det.score:.2f}"
            draw_label(frame, det.box[0], det.box[1], text, self.color)
        return frame
