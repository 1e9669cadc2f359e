from __future__ import annotations

from edgepipe.deploy.quantize.check import Agreement, matches
from edgepipe.vision.detection import Detection


def _face(x1: float, y1: float, x2: float, y2: float, class_id: int = 0) -> Detection:
    return Detection((x1, y1, x2, y2), 0.9, class_id, "face")


def test_a_detection_agrees_when_a_box_of_its_class_overlaps_it_enough() -> None:
    fp32 = [_face(0, 0, 10, 10), _face(50, 50, 60, 60), _face(100, 100, 110, 110)]
    int8 = [
        _face(1, 0, 11, 10),  # IoU 0.82 with the first
        _face(55, 55, 65, 65),  # IoU 0.14 with the second: too little
        _face(100, 100, 110, 110, class_id=1),  # the third's place, another class
    ]
    assert matches(fp32, int8, 0.5) == 1
    assert matches(fp32, int8, 0.1) == 2
    assert matches(fp32, [], 0.5) == 0


def test_one_int8_box_matches_one_fp32_box_only() -> None:
    fp32 = [_face(0, 0, 10, 10), _face(0, 0, 10, 11)]
    assert matches(fp32, [_face(0, 0, 10, 10)], 0.5) == 1


def test_agreement_share_is_none_without_fp32_detections() -> None:
    assert Agreement(0, 3, 0, 0.5).share is None
    assert Agreement(4, 4, 3, 0.5).share == 0.75


def test_a_box_taken_by_a_better_match_does_not_end_the_matching() -> None:
    # The first FP32 face overlaps both INT8 boxes; once it takes the first, the second INT8
    # box still matches the second FP32 face.
    fp32 = [_face(0, 0, 10, 10), _face(5, 0, 15, 10)]
    int8 = [_face(0, 0, 10, 10), _face(2, 0, 12, 10)]  # IoU 0.67 with the first, 0.54 the second
    assert matches(fp32, int8, 0.5) == 2
