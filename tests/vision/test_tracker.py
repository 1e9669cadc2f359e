from __future__ import annotations

from edgepipe.vision.detection import Detection
from edgepipe.vision.tracker import IouTracker, SourceTrackers


def det(x: float, y: float, class_id: int = 0) -> Detection:
    return Detection((x, y, x + 20, y + 20), 0.9, class_id, "obj")


def test_ids_follow_moving_objects_and_new_ones_get_new_ids() -> None:
    tracker = IouTracker()
    first = tracker.update([det(0, 0), det(100, 100)], seq=0)
    second = tracker.update([det(104, 100), det(4, 0), det(300, 300)], seq=3)
    assert [d.track_id for d in first] == [1, 2]
    assert [d.track_id for d in second] == [2, 1, 3]


def test_predicted_boxes_move_with_the_measured_velocity() -> None:
    tracker = IouTracker()
    tracker.update([det(0, 0)], seq=0)
    tracker.update([det(6, 0)], seq=3)  # 2 px per frame
    (moved,) = tracker.predict(seq=5)
    assert moved.track_id == 1
    assert moved.box == (10.0, 0.0, 30.0, 20.0)


def test_lost_tracks_are_dropped_and_other_classes_do_not_match() -> None:
    tracker = IouTracker(max_missed=1)
    tracker.update([det(0, 0)], seq=0)
    (other,) = tracker.update([det(0, 0, class_id=1)], seq=1)
    assert other.track_id == 2
    tracker.update([], seq=2)  # track 1 missed twice: gone; track 2 once: kept, not predicted
    assert [t.track_id for t in tracker.tracks] == [2]
    assert tracker.predict(seq=3) == []
    tracker.update([], seq=3)
    assert tracker.tracks == []


def test_each_source_has_its_own_tracks_until_cleared() -> None:
    trackers = SourceTrackers()
    trackers.update("cam0", [det(0, 0)], seq=0)
    (other,) = trackers.update("cam1", [det(100, 100)], seq=0)
    assert other.track_id == 1  # ids are per source
    assert [d.box for d in trackers.predict("cam0", seq=1)] == [(0.0, 0.0, 20.0, 20.0)]
    trackers.clear()
    assert trackers.predict("cam0", seq=2) == []
