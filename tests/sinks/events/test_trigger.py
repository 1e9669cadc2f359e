from __future__ import annotations

import pytest

from edgepipe.sinks.events.trigger import Hit, Trigger
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire.results import Message


def _dets(*items: tuple[str, float]) -> Detections:
    found = [Detection((0, 0, 10, 10), score, 0, label) for label, score in items]
    return Detections(
        source_id="cam", seq=1, pts=None, time_s=None, width=64, height=48, model="m", items=found
    )


def test_a_detection_of_a_label_over_the_score_triggers_with_the_best_one() -> None:
    trigger = Trigger(labels={"person"}, min_score=0.5)
    assert trigger.match(_dets(("car", 0.99), ("person", 0.4))) is None
    assert trigger.match(_dets(("person", 0.6), ("person", 0.8))) == Hit("detection", "person 0.80", "cam")
    assert Trigger(min_score=0.9).match(_dets(("car", 0.95))) == Hit("detection", "car 0.95", "cam")


def test_an_event_message_triggers_unless_told_not_to_or_a_recording_s_own() -> None:
    event = Message("event", {"what": "description", "text": "a person at the door"})
    assert Trigger().match(event) == Hit("event", "a person at the door", "")
    assert Trigger(events=False).match(event) is None
    assert Trigger().match(Message("event", {"what": "recording", "state": "start"})) is None
    assert Trigger().match(Message("token", {"text": "a"})) is None


def test_a_source_state_triggers_when_listed() -> None:
    stalled = Message("source_state", {"source": "cam", "state": "stalled", "reason": "no frame for 5 s"})
    assert Trigger().match(stalled) == Hit("source_state", "cam stalled: no frame for 5 s", "cam")
    assert Trigger(states={"reconnecting"}).match(stalled) is None
    assert Trigger().state("cam", "live") is None


def test_frames_and_other_items_do_not_trigger() -> None:
    assert Trigger().match(object()) is None
    assert Trigger().match({"no": "kind"}) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"min_score": 1.5}, "min_score must be in"), ({"labels": "person"}, "collections of names")],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Trigger(**kwargs)  # type: ignore[arg-type]
