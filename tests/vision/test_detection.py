from __future__ import annotations

import json

from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire.results import to_jsonable


def sample() -> Detections:
    return Detections(
        "cam", 7, 2100, 0.07, 640, 480, "centerface",
        [Detection((1.04, 2.0, 30.5, 40.26), 0.91234, 0, "face", ((5.0, 6.0),) * 5, track_id=3)],
        latency_ms=12.345, infer_ms=8.126,
    )  # fmt: skip


def test_json_as_results_write_it() -> None:
    data = json.loads(json.dumps(sample(), default=to_jsonable))
    assert data["source"] == "cam"
    assert (data["latency_ms"], data["infer_ms"]) == (12.35, 8.13)
    assert data["detections"][0] == {
        "box": [1.0, 2.0, 30.5, 40.3], "score": 0.9123, "class_id": 0, "label": "face",
        "landmarks": [[5.0, 6.0]] * 5, "track_id": 3,
    }  # fmt: skip
    assert "frame" not in data


def test_msgpack_round_trip() -> None:
    original = sample()
    back = Detections.from_msgpack(original.to_msgpack())
    assert back.to_dict() == original.to_dict()
    assert back.infer_ms == 8.13
    assert len(back) == 1
    assert back.items[0].center == (15.75, 21.15)  # boxes are kept to 0.1 px


def test_a_kept_frame_is_released_with_the_detections() -> None:
    import numpy as np

    from edgepipe.media.frame import from_rgb

    frame = from_rgb(np.zeros((16, 16, 3), np.uint8))
    frame.retain()
    result = sample()
    result.frame = frame
    result.release()
    assert frame.refs == 1
    assert result.frame is None
