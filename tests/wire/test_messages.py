from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire import messages
from edgepipe.wire.results import Message


def test_detections_message_round_trips_with_version() -> None:
    t_decoded = time.monotonic_ns() - 40_000_000  # left the decoder 40 ms ago
    dets = Detections(source_id="cam", seq=3, pts=None, time_s=None, width=640, height=360, model="m",
                      items=[Detection(box=(1.0, 2.0, 30.0, 40.0), score=0.91234, class_id=0, label="face",
                                       track_id=7)],
                      t_decoded_ns=t_decoded, latency_ms=12.345, inferred=False)  # fmt: skip
    message = messages.unpack(messages.pack(messages.detections_message(dets)))
    t_ms = message.pop("t_ms")
    assert abs(t_ms - (time.time() * 1000 - 40)) < 20  # wall-clock ms of the decode
    assert message == {"v": 1, "kind": "detections", "source": "cam", "seq": 3,
                       "pts_90k": round(t_decoded * 90_000 / 1e9), "latency_ms": 12.3, "inferred": False,
                       "w": 640, "h": 360, "boxes": [[1.0, 2.0, 30.0, 40.0, 0.9123, "face", 7]]}  # fmt: skip


def test_results_keep_their_kind_and_payload() -> None:
    token = Message("token", {"request": 3, "text": " a"})
    assert messages.message_of(token) == {"v": 1, "kind": "token", "request": 3, "text": " a"}
    # the runtime's own events name their node; a payload cannot overwrite v, kind or node
    state = Message("source_state", {"source": "cam", "state": "live", "kind": "x", "v": 9}, node="cam")
    assert messages.message_of(state) == {"v": 1, "kind": "source_state", "node": "cam", "source": "cam",
                                          "state": "live"}  # fmt: skip
    assert messages.message_of({"kind": "alarm", "zone": 2}, "rules") == {"v": 1, "kind": "alarm",
                                                                          "node": "rules", "zone": 2}  # fmt: skip
    assert messages.message_of(Message("count", 5)) == {"v": 1, "kind": "count", "data": 5}


def test_what_msgpack_cannot_hold_is_converted_not_raised() -> None:
    message = messages.message_of(Message("event", {"score": np.float32(0.5), "where": Path("/tmp/x"),
                                                    "shape": np.zeros((2, 2)), "odd": object()}))  # fmt: skip
    back = messages.unpack(messages.pack(message))
    assert back["score"] == 0.5
    assert back["where"] == "/tmp/x"
    assert back["shape"] == [[0.0, 0.0], [0.0, 0.0]]
    assert back["odd"].startswith("<object object")


def test_empty_detections_are_a_message_too() -> None:
    dets = Detections(source_id="cam", seq=0, pts=0, time_s=2.0, width=8, height=8, model="m",
                      t_decoded_ns=5_000_000_000)  # fmt: skip
    message = messages.detections_message(dets)
    assert message["boxes"] == []
    # the decode time, not the media time (which restarts when a camera is reconnected)
    assert message["pts_90k"] == 450_000


def test_a_frames_detections_are_known_by_their_kind_as_the_json_lines_know_it() -> None:
    # The schema reads what it needs of them (wire sits below vision): a Detections, or any
    # object whose class says kind = "detections"; a dict of that kind stays a plain result.
    dets = Detections(source_id="cam", seq=4, pts=0, time_s=0.0, width=8, height=8, model="m")
    assert messages.message_of(dets, "faces") == messages.detections_message(dets)
    assert messages.message_of({"kind": "detections", "n": 1}, "rules") == {
        "v": 1, "kind": "detections", "node": "rules", "n": 1,
    }  # fmt: skip
    assert messages.message("count", source="cam", count=2) == {"v": 1, "kind": "count", "source": "cam",
                                                                "count": 2}  # fmt: skip


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x93\x01\x02\x03", messages.pack({"v": 99, "kind": "x"})])
def test_unpack_refuses_what_is_not_a_message(data: bytes) -> None:
    with pytest.raises(ValueError, match="message"):
        messages.unpack(data)
