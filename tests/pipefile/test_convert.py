from __future__ import annotations

import enum
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest

from edgepipe.core.checks import Range
from edgepipe.pipefile.convert import from_text, from_value


class Mode(enum.Enum):
    FAST = "fast"
    EXACT = "exact"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        (3, int, 3),
        (3, float, 3.0),  # a TOML integer is a float too
        (2.5, float, 2.5),
        (True, bool, True),
        ("640", int, 640),  # a string goes through the command line's conversion
        ("0.5", float, 0.5),
        ("yes", bool, True),
        ("clip.mp4", str, "clip.mp4"),
        ("clip.mp4", Path, Path("clip.mp4")),
        ("clip.mp4", Path | None, Path("clip.mp4")),
        ("none", Path | None, None),
        (None, int | None, None),
        (7, int | None, 7),
        ("large", Literal["small", "large"], "large"),
        (2, Literal[1, 2], 2),
        ("EXACT", Mode, Mode.EXACT),
        ("exact", Mode, Mode.EXACT),
        (2, Level, Level.HIGH),
        (5, Annotated[int, Range(1, 9)], 5),
        ([1, 2], Any, [1, 2]),
    ],
)
def test_a_typed_value_becomes_the_parameter_type(value: Any, annotation: Any, expected: Any) -> None:
    converted = from_value(value, annotation)
    assert converted == expected
    assert type(converted) is type(expected)


@pytest.mark.parametrize(
    ("value", "annotation", "wanted"),
    [
        (2.5, int, "an integer"),
        (True, int, "an integer"),  # bool is an int to Python, never to a user
        (False, float, "a number"),
        (math.nan, float, "a number"),
        ("high", float, "a number"),
        (1, bool, "true or false"),
        (1, str, "a string (in quotes)"),
        ([1, 2], int, "an integer"),
        ({"a": 1}, str, "a string (in quotes)"),
        (3, Literal["small", "large"], "one of 'small', 'large'"),
        (True, Literal[1, 2], "one of '1', '2'"),
        (3, Level, "one of 'LOW', 'HIGH'"),
        (3, Path, "a Path"),
        (2.5, int | None, "an integer"),
    ],
)
def test_a_value_of_the_wrong_type_says_what_was_wanted(value: Any, annotation: Any, wanted: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(wanted) + "$"):
        from_value(value, annotation)


def test_text_is_converted_as_on_the_command_line() -> None:
    assert from_text("2", Literal[1, 2]) == 2
    assert from_text("none", int | None) is None
    assert from_text("off", bool) is False
    with pytest.raises(ValueError, match=r"^an integer$"):
        from_text("2.5", int)
    with pytest.raises(ValueError, match=r"^a number$"):
        from_text("nan", float)


class Blank(enum.Enum):
    NONE = ""
    ALL = "all"


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Path | None, None),  # as --output '' means no file; never Path('.')
        (Annotated[Path | None, Range(0)], None),
        (int | None, None),
        (str | None, ""),  # a value of its own
        (str, ""),
        (Blank | None, Blank.NONE),
    ],
)
def test_an_empty_string_is_none_unless_the_type_takes_it(annotation: Any, expected: Any) -> None:
    assert from_text("", annotation) == expected
    assert from_value("", annotation) == expected  # a TOML file's `out = ""`


def test_an_empty_string_is_no_path() -> None:
    for convert in (from_text, from_value):
        with pytest.raises(
            ValueError, match=r"^a path \(an empty one would be the current folder: give '\.' for that\)$"
        ):
            convert("", Path)
    assert from_text(".", Path) == Path(".")
