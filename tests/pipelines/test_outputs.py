"""What every shipped pipeline writes by default: nothing (a file only where the user says)."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

from edgepipe import WritableFile
from edgepipe.core.loader import load_module

PIPELINES = sorted((Path(__file__).resolve().parents[2] / "pipelines").glob("*.py"))


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.stem)
def test_no_output_file_is_written_unless_asked(path: Path) -> None:
    function = load_module(path).pipeline
    hints = typing.get_type_hints(function, include_extras=True)
    outputs = [
        name
        for name, hint in hints.items()
        if any(isinstance(m, WritableFile) for m in getattr(hint, "__metadata__", ()))
    ]
    defaults = {name: inspect.signature(function).parameters[name].default for name in outputs}
    assert all(value in ("", None) for value in defaults.values()), defaults


def test_the_shipped_pipelines_are_all_checked() -> None:
    assert {"demo", "face_privacy"} <= {p.stem for p in PIPELINES}  # the two with output files
