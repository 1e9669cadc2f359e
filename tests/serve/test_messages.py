from __future__ import annotations

import pytest

from edgepipe.serve import messages
from edgepipe.vision.detection import Detection, Detections


def test_detections_message_round_trips_with_version() -> None:
    dets = Detections(source_id="cam", seq=3, pts=None, time_s=None, width=640, height=360, model="m",
                      items=[Detection(box=(1.0, 2.0, 30.0, 40.0), score=0.91234, class_id=0, label="face")],
                      t_decoded_ns=1_000_000_000)  # fmt: skip
    message = messages.unpack(messages.pack(messages.detections_message(dets)))
    assert message == {"v": 1, "kind": "detections", "source": "cam", "seq": 3, "pts_90k": 90_000,
                       "w": 640, "h": 360, "boxes": [[1.0, 2.0, 30.0, 40.0, 0.9123, "face"]]}  # fmt: skip


def test_empty_detections_are_a_message_too() -> None:
    dets = Detections(source_id="cam", seq=0, pts=0, time_s=2.0, width=8, height=8, model="m")
    message = messages.detections_message(dets)
    assert message["boxes"] == []
    assert message["pts_90k"] == 180_000  # media time wins over decode time


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x93\x01\x02\x03", messages.pack({"v": 99, "kind": "x"})])
def test_unpack_refuses_what_is_not_a_message(data: bytes) -> None:
    with pytest.raises(ValueError, match="message"):
        messages.unpack(data)
