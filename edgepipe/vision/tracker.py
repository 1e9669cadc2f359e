"""A light IoU tracker: keeps ids on objects between detections and carries their boxes over
the frames the model skips (``Detector(every=N)``).

Each detection is matched to the live track of the same class it overlaps most (greedy, best
IoU first, above ``match_iou``); unmatched detections open new tracks; a track unmatched for
``max_missed`` detection rounds is closed. Between detections, a track's box moves by its
last measured velocity (pixels per frame), so the pixelation follows a face across skipped frames.
:class:`SourceTrackers` keeps one tracker per video source for a node that sees several.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

import numpy as np

from edgepipe.vision.detection import Detection
from edgepipe.vision.nms import iou_matrix

MATCH_IOU = 0.3
"""The overlap a detection needs with a track's (predicted) box to continue it."""


@dataclass(slots=True)
class Track:
    track_id: int
    detection: Detection
    box: np.ndarray
    """Current box (predicted between detections)."""
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(4, np.float32))
    """Box change per frame, measured between the last two matched detections."""
    last_seq: int = 0
    missed: int = 0


class IouTracker:
    """Tracks of one video source. Not thread-safe (one per source, used by one worker)."""

    def __init__(self, match_iou: float = MATCH_IOU, max_missed: int = 2) -> None:
        self.match_iou = match_iou
        self.max_missed = max_missed
        self.tracks: list[Track] = []
        self._next_id = 1

    def update(self, detections: list[Detection], seq: int) -> list[Detection]:
        """Match the model's detections of frame ``seq``; they come back with ``track_id`` set."""
        boxes = np.array([d.box for d in detections], np.float32).reshape(-1, 4)
        unmatched_tracks = set(range(len(self.tracks)))
        unmatched_dets = set(range(len(detections)))
        if self.tracks and detections:
            current = np.stack([t.box for t in self.tracks])
            iou = iou_matrix(boxes, current)
            for d_index, t_index in zip(
                *np.unravel_index(np.argsort(-iou, axis=None), iou.shape), strict=True
            ):
                if iou[d_index, t_index] < self.match_iou:
                    break
                if d_index not in unmatched_dets or t_index not in unmatched_tracks:
                    continue
                track = self.tracks[t_index]
                if track.detection.class_id != detections[d_index].class_id:
                    continue
                frames = max(1, seq - track.last_seq)
                track.velocity = (
                    (boxes[d_index] - track.box) / frames if track.missed == 0 else track.velocity
                )
                track.box = boxes[d_index].copy()
                track.detection = detections[d_index]
                track.last_seq = seq
                track.missed = 0
                detections[d_index].track_id = track.track_id
                unmatched_dets.discard(int(d_index))
                unmatched_tracks.discard(int(t_index))
        for t_index in unmatched_tracks:
            self.tracks[t_index].missed += 1
        self.tracks = [t for t in self.tracks if t.missed <= self.max_missed]
        for d_index in sorted(unmatched_dets):
            det = detections[d_index]
            det.track_id = self._next_id
            self.tracks.append(Track(self._next_id, det, boxes[d_index].copy(), last_seq=seq))
            self._next_id += 1
        return detections

    def predict(self, seq: int) -> list[Detection]:
        """Boxes for a frame the model skipped: each matched track moved by its velocity."""
        out: list[Detection] = []
        for track in self.tracks:
            if track.missed:
                continue  # lost at the last detection: do not invent where it went
            frames = seq - track.last_seq
            box = track.box + track.velocity * frames
            det = track.detection
            shift = (box[:2] - track.box[:2]).tolist() if det.landmarks is not None else None
            landmarks = None
            if det.landmarks is not None and shift is not None:
                landmarks = tuple((x + shift[0], y + shift[1]) for x, y in det.landmarks)
            out.append(Detection(
                (float(box[0]), float(box[1]), float(box[2]), float(box[3])), det.score, det.class_id,
                det.label, landmarks, track.track_id,
            ))  # fmt: skip
        return out


class SourceTrackers:
    """One :class:`IouTracker` per video source, made on the source's first frame. Thread-safe:
    a call abandoned at its deadline may finish during the next one."""

    def __init__(self) -> None:
        self._trackers: dict[str, IouTracker] = {}
        self._lock = threading.Lock()

    def update(self, source_id: str, detections: list[Detection], seq: int) -> list[Detection]:
        """:meth:`IouTracker.update` on the source's tracker."""
        with self._lock:
            return self._tracker(source_id).update(detections, seq)

    def predict(self, source_id: str, seq: int) -> list[Detection]:
        """:meth:`IouTracker.predict` on the source's tracker."""
        with self._lock:
            return self._tracker(source_id).predict(seq)

    def follow(
        self, source_id: str, found: list[Detection] | None, seq: int, *, ids: bool
    ) -> list[Detection]:
        """The boxes of frame ``seq``: the model's (``found``) matched to the tracks, with track
        ids when ``ids`` (else the tracks follow copies, in case the interval rises later); or
        the tracks carried over a frame the model skipped (``found`` None)."""
        if found is None:
            return self.predict(source_id, seq)
        if ids:
            return self.update(source_id, found, seq)
        self.update(source_id, [replace(d) for d in found], seq)
        return found

    def clear(self) -> None:
        """Forget every source's tracks."""
        with self._lock:
            self._trackers.clear()

    def _tracker(self, source_id: str) -> IouTracker:
        return self._trackers.setdefault(source_id, IouTracker())
