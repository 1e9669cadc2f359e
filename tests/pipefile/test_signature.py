from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated

from edgepipe.core.checks import Range
from edgepipe.pipefile.params import WritableFile
from edgepipe.pipefile.signature import Param, parameters


def pipeline(
    input_size: Annotated[int, Range(32, 4096)] = 640,
    every_s: Annotated[float, Range(0, low_open=True)] | None = None,
    output: Annotated[str, WritableFile()] = "",
    model: Path | None = None,
    untyped=7,  # type: ignore[no-untyped-def]
    *extra: int,
) -> None:
    """Summary.

    Args:
        input_size: the model's input,
            in pixels.
        every_s: how often.
    """


def test_parameters_carry_type_constraints_default_and_help() -> None:
    params = {p.name: p for p in parameters(pipeline)}
    assert list(params) == ["input_size", "every_s", "output", "model", "untyped"]  # not *extra
    assert params["input_size"] == Param(
        "input_size", int, 640, (Range(32, 4096),), "the model's input, in pixels."
    )
    assert params["every_s"].constraints == (Range(0, low_open=True),)
    assert params["every_s"].help == "how often."
    assert params["output"].annotation is str
    assert params["output"].constraints == (WritableFile(),)
    assert params["output"].help == ""
    assert params["model"].annotation == Path | None
    assert params["untyped"].annotation is int  # its default's type
    assert params["input_size"].flag == "--input-size"
    assert not params["input_size"].required
    assert Param("x", int, inspect.Parameter.empty).required


class Given:
    """Refuses None, as ``ModelFolder`` does."""

    def check(self, value: object) -> None:
        if value is None:
            raise ValueError("a folder")


def test_a_none_default_that_a_constraint_refuses_is_no_default() -> None:
    model = Param("model", Path | None, None, (WritableFile(), Given()))  # the second refuses
    assert model.none_refused
    assert not model.required  # it has a default, for Python: the loader says it is missing
    assert model.refusal(None) == "a folder"
    assert Param("model", Path | None, None, (Given(),)).refusal(Path("m")) is None
    assert not Param("model", Path | None, None, (WritableFile(),)).none_refused  # None: write nothing
    assert not Param("model", Path | None, Path("m"), (Given(),)).none_refused
