"""Each output family decoded end to end: a model built in the test with known outputs, run by
the Detector on a 640x480 frame (letterboxed into 320x320: scale 0.5, 40 px border on top)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgepipe.infer import SessionConfig
from edgepipe.media.frame import from_rgb
from edgepipe.vision import AdapterError, Detector
from edgepipe.vision.adapters import decode, guess
from tests.support.onnx_builders import constant_detector

FRAME = from_rgb(np.zeros((480, 640, 3), np.uint8))
# In the 320x320 input: box (140, 150)-(180, 170); in the 640x480 frame: (280, 220)-(360, 260).
CX, CY, W, H = 160.0, 160.0, 40.0, 20.0
SOURCE_BOX = (280.0, 220.0, 360.0, 260.0)
SHIFTED = (284.0, 220.0, 364.0, 260.0)  # cx + 2 in the input


def run(tmp_path: Path, outputs: dict[str, np.ndarray], **kwargs: object):  # type: ignore[no-untyped-def]
    model = constant_detector(tmp_path / "m.onnx", outputs, size=320, nhwc=bool(kwargs.pop("nhwc", False)))
    detector = Detector(str(model), labels=["a", "b", "c"], session=SessionConfig(cache_optimized=False),
                        **kwargs)  # type: ignore[arg-type]  # fmt: skip
    detector.open()
    return detector, detector.process(FRAME)


def summary(result) -> list[tuple[int, float, tuple[float, ...]]]:  # type: ignore[no-untyped-def]
    return [(d.class_id, round(d.score, 3), tuple(round(v, 1) for v in d.box)) for d in result]


def test_yolov8_class_aware_nms(tmp_path: Path) -> None:
    pred = np.zeros((1, 7, 8), np.float32)  # [1, 4 + 3 classes, 8 anchors]
    pred[0, :, 0] = [CX, CY, W, H, 0.1, 0.8, 0.05]  # class 1 at 0.8
    pred[0, :, 1] = [CX + 1, CY, W, H, 0.0, 0.6, 0.0]  # same place, same class, lower: suppressed
    pred[0, :, 2] = [CX + 2, CY, W, H, 0.0, 0.0, 0.7]  # same place, other class: kept
    pred[0, :, 3] = [50, 50, 10, 10, 0.1, 0.1, 0.1]  # below the threshold
    detector, result = run(tmp_path, {"output0": pred})
    assert detector.adapter == "yolov8"
    assert summary(result) == [(1, 0.8, SOURCE_BOX), (2, 0.7, SHIFTED)]
    assert [d.label for d in result] == ["b", "c"]


def test_yolov5_objectness_times_class_score(tmp_path: Path) -> None:
    pred = np.zeros((1, 3, 8), np.float32)  # [1, anchors, 5 + 3]
    pred[0, 0] = [CX, CY, W, H, 0.9, 0.1, 0.9, 0.0]
    pred[0, 1] = [CX + 1, CY, W, H, 0.9, 0.1, 0.5, 0.0]
    pred[0, 2] = [CX, CY, W, H, 0.1, 1.0, 0.0, 0.0]
    _, result = run(tmp_path, {"output": pred}, adapter="yolov5")
    assert summary(result) == [(1, 0.81, SOURCE_BOX)]


def test_yolo_with_nms_in_the_graph(tmp_path: Path) -> None:
    pred = np.zeros((1, 100, 6), np.float32)  # x1, y1, x2, y2, score, class; unused rows score 0
    pred[0, 0] = [140, 150, 180, 170, 0.75, 2]
    pred[0, 1] = [141, 150, 181, 170, 0.70, 2]  # the graph's NMS kept it: so do we
    detector, result = run(tmp_path, {"output0": pred})
    assert detector.adapter == "yolo-nms"
    assert summary(result) == [(2, 0.75, SOURCE_BOX), (2, 0.7, (282.0, 220.0, 362.0, 260.0))]


def test_ssd_boxes_scores_classes_count_nhwc(tmp_path: Path) -> None:
    boxes = np.zeros((1, 10, 4), np.float32)
    boxes[0, 0] = [150 / 320, 140 / 320, 170 / 320, 180 / 320]  # ymin, xmin, ymax, xmax in 0..1
    boxes[0, 1] = [0, 0, 1, 1]  # beyond num_detections: ignored
    scores = np.zeros((1, 10), np.float32)
    scores[0, :2] = [0.9, 0.95]
    classes = np.zeros((1, 10), np.float32)
    classes[0, :2] = [1, 1]
    outputs = {"detection_boxes": boxes, "detection_scores": scores, "detection_classes": classes,
               "num_detections": np.array([1], np.float32)}  # fmt: skip
    detector, result = run(tmp_path, outputs, nhwc=True)
    assert detector.adapter == "ssd"
    assert detector.input_format is not None
    assert detector.input_format.layout == "nhwc"
    assert summary(result) == [(1, 0.9, SOURCE_BOX)]


@pytest.mark.parametrize(
    ("shapes", "adapter"),
    [
        ([(1, 25200, 85)], "yolov5"),
        ([(1, 84, 8400)], "yolov8"),
        ([(1, 300, 6)], "yolo-nms"),
        ([(12, 7)], "yolo-nms"),
        ([(1, 100, 4), (1, 100), (1, 100), (1,)], "ssd"),
        ([(1, 1, 120, 160), (1, 2, 120, 160), (1, 2, 120, 160), (1, 10, 120, 160)], "centerface"),
    ],
)
def test_guess_from_shapes(shapes: list[tuple[int, ...]], adapter: str) -> None:
    assert guess([f"o{i}" for i in range(len(shapes))], shapes) == adapter


def test_unknown_outputs_ask_for_an_adapter() -> None:
    with pytest.raises(AdapterError, match=r"logits \[1, 1000\].*family edgepipe knows.*adapter=NAME"):
        guess(["logits"], [(1, 1000)])


def test_outputs_that_do_not_fit_the_adapter_are_named() -> None:
    with pytest.raises(AdapterError, match=r"adapter 'centerface' cannot read outputs \[1, 84, 8400\]"):
        decode("centerface", [np.zeros((1, 84, 8400), np.float32)], ["o"], 0.5, 640, 640)


def test_every_n_frames_the_tracker_fills_in(tmp_path: Path) -> None:
    pred = np.zeros((1, 7, 8), np.float32)
    pred[0, :, 0] = [CX, CY, W, H, 0.9, 0.0, 0.0]
    model = constant_detector(tmp_path / "m.onnx", {"output0": pred}, size=320)
    detector = Detector(str(model), every=3, session=SessionConfig(cache_optimized=False))
    detector.open()
    results = []
    for seq in range(7):
        frame = from_rgb(np.zeros((480, 640, 3), np.uint8), source_id="cam", seq=seq)
        results.append(detector.process(frame))
    assert [r.inferred for r in results] == [True, False, False, True, False, False, True]
    assert detector.inferred == 3
    # The model run's wall time goes with the results it made; a carried frame had none.
    assert all((r.infer_ms is not None and r.infer_ms > 0) == r.inferred for r in results)
    assert {d.track_id for r in results for d in r} == {1}
    assert all(len(r) == 1 for r in results)


def test_each_new_source_starts_with_a_model_run_then_takes_its_turn(tmp_path: Path) -> None:
    pred = np.zeros((1, 7, 8), np.float32)
    pred[0, :, 0] = [CX, CY, W, H, 0.9, 0.0, 0.0]
    model = constant_detector(tmp_path / "m.onnx", {"output0": pred}, size=320)
    detector = Detector(str(model), every=4, session=SessionConfig(cache_optimized=False))
    runs: dict[str, list[bool]] = {}
    for seq in range(4):
        for cam in ("cam0", "cam1", "cam2", "cam3"):
            result = detector.process(from_rgb(np.zeros((480, 640, 3), np.uint8), source_id=cam, seq=seq))
            runs.setdefault(cam, []).append(result.inferred)
            assert len(result) == 1  # the first frame already has its box
    assert all(r[0] for r in runs.values())
    # After the first frame, the cameras' turns are staggered: never all on the same frame.
    assert [sum(r[s] for r in runs.values()) for s in range(1, 4)] == [1, 1, 1]


def test_every_without_the_tracker_is_refused() -> None:
    with pytest.raises(ValueError, match="every > 1 needs the tracker"):
        Detector("centerface", every=3, track=False)


def test_the_governor_may_raise_the_interval_of_a_default_detector(tmp_path: Path) -> None:
    pred = np.zeros((1, 7, 8), np.float32)
    pred[0, :, 0] = [CX, CY, W, H, 0.9, 0.0, 0.0]
    model = constant_detector(tmp_path / "m.onnx", {"output0": pred}, size=320)
    detector = Detector(str(model), session=SessionConfig(cache_optimized=False))  # every=1
    knob = detector.governor_knobs("faces", 1)[0]
    assert not knob.pinned
    frame = np.zeros((480, 640, 3), np.uint8)
    first = detector.process(from_rgb(frame, source_id="cam", seq=0))
    assert first.inferred
    assert first.items[0].track_id is None  # not tracking: no ids, even though the tracker is kept warm
    knob.set(1)  # the governor: the model on 1 frame in 2
    results = [detector.process(from_rgb(frame, source_id="cam", seq=s)) for s in (1, 2, 3)]
    assert [r.inferred for r in results].count(False) >= 1
    carried = next(r for r in results if not r.inferred)
    assert len(carried) == 1, "the tracker carries the box over the frame the model skipped"
    assert Detector(str(model), pin_every=True).governor_knobs("faces", 1)[0].pinned
