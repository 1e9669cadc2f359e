from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from edgepipe.infer import SessionConfig
from edgepipe.infer.errors import ModelInputError, ModelNotFound
from edgepipe.vision import Detector, DetectorConfig
from edgepipe.vision.config import DEFAULT_SESSION
from tests.support.onnx_builders import constant_detector


def test_the_detectors_keywords_are_its_configs_fields() -> None:
    fields = [f.name for f in dataclasses.fields(DetectorConfig) if f.init]
    assert list(inspect.signature(Detector).parameters) == fields
    detector = Detector("centerface", every=3, classes=["face"])
    assert detector.config == DetectorConfig("centerface", every=3, classes=["face"])
    assert Detector.from_config(detector.config).config == detector.config


def test_what_is_given_is_kept_frozen() -> None:
    labels, classes = ["a", "b"], ["b"]
    config = DetectorConfig("m.onnx", labels=labels, classes=classes)
    labels.append("c")
    classes.clear()
    assert (config.labels, config.classes) == (("a", "b"), frozenset({"b"}))
    assert DetectorConfig(classes=[]).classes is None  # none named: all kept
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.every = 2  # type: ignore[misc]


def test_what_is_left_unsaid_is_derived() -> None:
    plain = DetectorConfig()
    assert plain.session_config == DEFAULT_SESSION == SessionConfig(timeout_s=2.0)
    assert DetectorConfig(session=SessionConfig(threads=2)).session_config.threads == 2
    assert (plain.track_ids, plain.may_track, plain.instances_asked) == (False, True, "auto")
    assert DetectorConfig(every=3).track_ids
    assert not DetectorConfig(track=False).may_track
    assert DetectorConfig(prefer="latency").instances_asked == 1
    assert Detector(prefer="latency").instances == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every": 0}, "every must be at least 1, got 0"),
        ({"batch_size": 0}, "batch_size must be at least 1, got 0"),
        ({"instances": 0}, "instances must be a count of at least 1 or 'auto', got 0"),
        ({"instances": True}, "instances must be a count of at least 1 or 'auto', got True"),
        ({"prefer": "speed"}, "prefer must be 'throughput' or 'latency', got 'speed'"),
        ({"prefer": "latency", "instances": 2}, "prefer='latency' runs one call at a time; instances=2"),
        ({"every": 2, "track": False}, "every > 1 needs the tracker"),
        ({"adapter": "yolov9"}, "unknown adapter 'yolov9'; use auto or one of centerface"),
    ],
)
def test_settings_that_cannot_work_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        DetectorConfig(**kwargs)  # type: ignore[arg-type]


def test_a_model_name_the_registry_has_not_is_refused_when_the_detector_is_made() -> None:
    # Wrong before anything runs: `edgepipe run` says so with exit 2, not at the node's start.
    with pytest.raises(
        ModelNotFound,
        match=r"model centerfce: not a file and not a registry name; did you mean 'centerface'\?",
    ):
        Detector("centerfce")
    Detector("CenterFace")  # a name is found whatever its case
    Detector("later.onnx")  # a path is the session's to open, when the node starts


def test_a_model_file_the_detector_cannot_feed_is_refused_when_the_detector_is_made(tmp_path: Path) -> None:
    # Wrong before anything runs (`edgepipe run` exits 2), not at the warm-up run (exit 1).
    pred = {"output0": np.zeros((1, 7, 8), np.float32)}
    path = constant_detector(tmp_path / "b10.onnx", pred, size=32, batch=10)
    with pytest.raises(ModelInputError, match=r"input 'images' is \[10, 3, 32, 32\] float32, a fixed batch"):
        Detector(str(path))
    Detector(str(path), session=SessionConfig(free_image_dims=True))  # its dims freed as it loads
