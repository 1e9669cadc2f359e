"""Turning a given value into a pipeline parameter's type, by its annotation.

Two doors, one set of rules: :func:`from_text` for a command-line string (``"30"`` → ``30.0``
for a ``float``), :func:`from_value` for a value that already has a type, such as a TOML
file's (``30`` → ``30.0``; a string goes through :func:`from_text`, so ``"30"`` works there
too). Both raise ``ValueError`` whose text says what was wanted (``"an integer"``, ``"one of
'small', 'large'"``), for the caller to put in a message naming the parameter.

``""`` is ``None`` for ``X | None`` (as ``--output ''`` means no file), unless an arm takes it as
a value (``str | None``); a plain ``Path`` refuses it (``Path("")`` is the current folder).
"""

from __future__ import annotations

import enum
import inspect
import math
import types
import typing
from pathlib import PurePath
from typing import Any


def from_text(text: str, annotation: Any) -> Any:
    """Convert one command-line string by a type annotation."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return from_text(text, typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        if type(None) in typing.get_args(annotation) and (
            text.lower() in ("none", "null") or (text == "" and not _takes_empty(annotation))
        ):
            return None  # '' too, as for ``--output ''``, unless an arm takes it (``str | None``)
        return _first_arm(lambda arm: from_text(text, arm), annotation)
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        for choice in choices:
            if str(choice) == text:
                return choice
        raise ValueError(_one_of(str(c) for c in choices))
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is str:
        return text
    if annotation is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError("true or false")
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        for member in annotation:
            if text in (member.name, str(member.value)):
                return member
        raise ValueError(_one_of(m.name for m in annotation))
    if annotation in (int, float):
        try:
            number = annotation(text)
        except ValueError:
            raise ValueError(_number_wanted(annotation)) from None
        if math.isnan(number):  # never what anyone means: every comparison with it is False
            raise ValueError("a number")
        return number
    if text == "" and isinstance(annotation, type) and issubclass(annotation, PurePath):
        raise ValueError("a path (an empty one would be the current folder: give '.' for that)")
    if isinstance(annotation, type):
        try:
            return annotation(text)
        except Exception as exc:
            raise ValueError(f"a {annotation.__name__} ({exc})") from None
    return text


def _takes_empty(union: Any) -> bool:
    """Whether an arm of ``union`` takes ``""`` as a value of its own (``str``, ``Any``, a
    ``Literal`` with ``""``)."""
    for arm in typing.get_args(union):
        while typing.get_origin(arm) is typing.Annotated:
            arm = typing.get_args(arm)[0]
        if arm in (str, Any) or (typing.get_origin(arm) is typing.Literal and "" in typing.get_args(arm)):
            return True
        if isinstance(arm, type) and issubclass(arm, enum.Enum) and any("" in (m.name, m.value) for m in arm):
            return True
    return False


def from_value(value: Any, annotation: Any) -> Any:
    """Convert a typed value (a TOML file's: str, int, float, bool, or a date, array or table)
    by a type annotation. A string is converted as on the command line; an ``int`` is a
    ``float`` too; otherwise the value must have the type asked for (``true`` is no number,
    ``1`` is no string)."""
    if isinstance(value, str):
        return from_text(value, annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return from_value(value, typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(annotation):
            return None
        return _first_arm(lambda arm: from_value(value, arm), annotation)
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        for choice in choices:
            if type(choice) is type(value) and choice == value:
                return choice
        raise ValueError(_one_of(str(c) for c in choices))
    if annotation is inspect.Parameter.empty or annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ValueError("true or false")
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        for member in annotation:
            if type(member.value) is type(value) and member.value == value:
                return member
        raise ValueError(_one_of(m.name for m in annotation))
    if isinstance(value, bool):  # bool is an int to Python, never to a user
        raise ValueError(_wanted(annotation))
    if annotation is int and isinstance(value, int):
        return value
    if annotation is float and isinstance(value, int | float) and not math.isnan(value):
        return float(value)
    if annotation not in (int, float, str) and isinstance(annotation, type) and isinstance(value, annotation):
        return value
    raise ValueError(_wanted(annotation))


def _first_arm(convert: typing.Callable[[Any], Any], union: Any) -> Any:
    """The first arm of ``X | Y | None`` that takes the value; else every arm's wish."""
    errors = []
    for arm in typing.get_args(union):
        if arm is type(None):
            continue
        try:
            return convert(arm)
        except ValueError as exc:
            errors.append(str(exc))
    raise ValueError(" or ".join(errors))


def _wanted(annotation: Any) -> str:
    if annotation in (int, float):
        return _number_wanted(annotation)
    if annotation is str:
        return "a string (in quotes)"
    return f"a {getattr(annotation, '__name__', annotation)}"


def _number_wanted(annotation: Any) -> str:
    return "an integer" if annotation is int else "a number"


def _one_of(names: typing.Iterable[str]) -> str:
    return "one of " + ", ".join(repr(n) for n in names)
