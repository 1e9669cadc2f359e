"""What every shipped pipeline writes by default: nothing (a file only where the user says)."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

from edgepipe import WritableFile, WritableFolder, load_pipeline
from edgepipe.pipefile.loader import load_module

REPO_PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
PIPELINES = sorted(REPO_PIPELINES.glob("*.py"))


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.stem)
def test_no_output_file_is_written_unless_asked(path: Path) -> None:
    function = load_module(path).pipeline
    hints = typing.get_type_hints(function, include_extras=True)
    outputs = [
        name
        for name, hint in hints.items()
        if any(isinstance(m, WritableFile | WritableFolder) for m in getattr(hint, "__metadata__", ()))
    ]
    defaults = {name: inspect.signature(function).parameters[name].default for name in outputs}
    assert all(value in ("", None) for value in defaults.values()), defaults


def test_the_shipped_pipelines_are_all_checked() -> None:
    assert {"demo", "face_privacy"} <= {p.stem for p in PIPELINES}  # the two with output files


SINK_PARAMS = ("mqtt", "events_dir")  # a broker to publish to, a folder for event clips


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.stem)
def test_no_broker_and_no_event_clip_unless_asked(path: Path) -> None:
    parameters = inspect.signature(load_module(path).pipeline).parameters
    assert {name: parameters[name].default for name in SINK_PARAMS if name in parameters} == {
        name: "" for name in SINK_PARAMS if name in parameters
    }
    if path.stem in ("demo", "face_privacy"):  # describe_scene needs a model folder to be declared
        nodes = {node.node_id for node in load_pipeline(path, []).nodes}
        assert not nodes & {"mqtt", "events", "event_log"}, nodes


def test_the_camera_pipelines_take_a_broker_and_an_events_folder() -> None:
    for stem in ("demo", "describe_scene", "face_privacy"):
        function = load_module(REPO_PIPELINES / f"{stem}.py").pipeline
        assert set(SINK_PARAMS) <= set(inspect.signature(function).parameters), stem
        # checked at the door (exit 2 before a camera opens), as an output file is
        hint = typing.get_type_hints(function, include_extras=True)["events_dir"]
        assert any(isinstance(m, WritableFolder) for m in hint.__metadata__), stem
