from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe import Pipeline
from edgepipe.sinks.wiring import add_mqtt_and_events
from edgepipe.testing import FakeSource


def declared(**kwargs: object) -> Pipeline:
    p = Pipeline("wired")
    camera = p.source("camera", FakeSource([]))
    faces = p.stage("faces", lambda frame: frame, inputs=camera)
    options = {"mqtt": "", "events_dir": "", "frames": camera, "triggers": faces, "results": [faces],
               "live": True} | kwargs  # fmt: skip
    add_mqtt_and_events(p, **options)  # type: ignore[arg-type]
    return p


def test_nothing_is_added_without_a_broker_or_a_folder() -> None:
    assert {n.node_id for n in declared().nodes} == {"camera", "faces"}


def test_the_clips_events_go_to_the_broker_with_the_results(tmp_path: Path) -> None:
    p = declared(mqtt="mqtt://127.0.0.1:1883", events_dir=str(tmp_path / "events"))
    nodes = {n.node_id: n for n in p.nodes}
    assert set(nodes) == {"camera", "faces", "events", "event_log", "mqtt"}
    assert list(nodes["mqtt"].inputs) == ["faces", "events"]
    assert list(nodes["events"].inputs) == ["camera", "faces"]
    assert not (tmp_path / "events").exists()  # nothing written at declaration


def test_clips_without_a_detector_are_refused() -> None:
    with pytest.raises(ValueError, match="events_dir: event clips start on a face"):
        declared(events_dir="events", triggers=None)
