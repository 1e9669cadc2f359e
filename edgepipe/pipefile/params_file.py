"""A pipeline's parameters from a TOML file (``edgepipe run FILE --params camera.toml``)::

    # camera.toml: one camera's settings, kept with it
    source = "rtsp://192.0.2.10/stream"
    threshold = 0.5
    input-size = 960        # input_size: dashes or underscores
    realtime = true

Keys are the parameter names, at the top level of the file (no tables: one file holds one
pipeline's parameters, as its command line does). Values are converted and checked by the same
annotations and constraints as command-line values: an integer is a float too, a string goes
through the command line's conversion (``"640"`` for an ``int``, ``"none"`` for ``X | None``).
Every failure is a :class:`ParameterError` naming the file, the line where it is known, and the
key; values given on the command line win over the file's (:mod:`edgepipe.pipefile.loader`).
"""

from __future__ import annotations

import datetime
import difflib
import os
import re
import tomllib
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, NoReturn

from edgepipe.core.checks import not_a_file
from edgepipe.core.errors import ParameterError
from edgepipe.pipefile.convert import from_value
from edgepipe.pipefile.signature import Param

_AT = re.compile(r"\s*\(at line (?P<line>\d+), column (?P<column>\d+)\)$")


def read_param_file(
    path: str | os.PathLike[str], params: Sequence[Param], *, overridden: Collection[str] = ()
) -> dict[str, Any]:
    """``{name: value}`` for each key of the file, converted and checked against its
    constraints, except those of the parameters named in ``overridden`` (given on the command
    line: their file values are not used). Raises :class:`ParameterError` for a file that is
    missing, unreadable or not TOML, an unknown or repeated key, a table, or a value of the
    wrong type or (unless overridden) out of range."""
    path = os.fspath(path)
    if (kind := not_a_file(path)) is not None:  # reading a FIFO would wait for a writer forever
        raise ParameterError(f"is {kind}, not a parameter file (give the path of a .toml file)", path=path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParameterError("no such parameter file (give the path of a .toml file)", path=path) from None
    except IsADirectoryError:
        raise ParameterError("is a folder (give the path of a .toml file)", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ParameterError(f"the parameter file cannot be read: {reason}", path=path) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        _bad_toml(path, text, str(exc))
    by_name = {p.name: p for p in params}
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for key, raw in data.items():
        line = _line_of(text, key)

        def fail(message: str, line: int | None = line) -> NoReturn:
            raise ParameterError(message, path=path, line=line)

        if isinstance(raw, dict):
            fail(f"[{key}] is a table; parameters are top-level `name = value` lines, before any [table]")
        param = by_name.get(key.replace("-", "_"))
        if param is None:
            names = sorted(by_name)
            hint = difflib.get_close_matches(key.replace("-", "_"), names, n=1)
            also = f"; did you mean {hint[0]!r}?" if hint else ""
            fail(f"unknown parameter {key!r}{also} (parameters: {', '.join(names) or 'none'})")
        if param.name in keys:
            fail(f"{param.name} is given twice ({keys[param.name]!r} and {key!r})")
        keys[param.name] = key
        try:
            value = from_value(raw, param.annotation)
            for constraint in () if param.name in overridden else param.constraints:
                constraint.check(value)
        except ValueError as exc:
            fail(f"{key}: expected {exc}, got {_shown(raw)}")
        values[param.name] = value
    return values


def _bad_toml(path: str, text: str, message: str) -> NoReturn:
    """``camera.toml:3: not valid TOML: Invalid value at column 13: threshold = .5``."""
    at = _AT.search(message)
    if at is None:
        raise ParameterError(f"not valid TOML: {message}", path=path)
    line = int(at["line"])
    lines = text.splitlines()
    shown = f": {lines[line - 1].strip()}" if 0 < line <= len(lines) and lines[line - 1].strip() else ""
    reason = message[: at.start()]
    raise ParameterError(f"not valid TOML: {reason} at column {at['column']}{shown}", path=path, line=line)


def _line_of(text: str, key: str) -> int | None:
    """The line that sets top-level ``key`` or opens table ``[key]`` (for the message; ``None``
    if not found)."""
    quoted = rf"""(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')"""
    setting, opening = re.compile(rf"\s*{quoted}\s*="), re.compile(rf"\s*\[\s*{quoted}\s*\]")
    top_level = True
    for number, line in enumerate(text.splitlines(), 1):
        if opening.match(line):
            return number
        if line.lstrip().startswith("["):  # a table: the top level is over
            top_level = False
        elif top_level and setting.match(line):
            return number
    return None


def _shown(value: Any) -> str:
    """A TOML value as the file wrote it, or what it is for an array or a date."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "an array"
    if isinstance(value, datetime.date | datetime.time):
        return f"a date/time ({value.isoformat()})"
    return str(value)
