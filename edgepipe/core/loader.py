"""Loading a pipeline file and calling its ``pipeline()`` with command-line parameters.

``pipelines/NAME.py`` defines ``def pipeline(**params) -> Pipeline``. Parameters come from the
command line as ``--name value`` (``--name=value``; ``--flag``/``--no-flag`` for a bool) and are
converted by the function's annotations; ``Annotated[int, Range(32, 4096)]`` and the other
constraints of :mod:`edgepipe.core.params` are checked on every value, given or default, before
``pipeline()`` is called. Every failure is a :class:`PipelineError` that names
the file and line; none shows a traceback of edgepipe's own frames.
"""

from __future__ import annotations

import difflib
import enum
import importlib.util
import inspect
import math
import os
import sys
import traceback
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepipe.core.errors import GraphError, ParameterError, PipelineFileError
from edgepipe.core.params import Constraint
from edgepipe.core.pipeline import Pipeline


@dataclass(frozen=True)
class Param:
    """One parameter of a pipeline function."""

    name: str
    annotation: Any
    default: Any
    """``inspect.Parameter.empty`` when required."""
    constraints: tuple[Constraint, ...] = ()
    """What ``Annotated[...]`` adds to the type: :class:`~edgepipe.core.params.Range` …"""

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _line_in(path: str, tb: types.TracebackType | None) -> int | None:
    """The deepest line of the traceback that is in the pipeline file."""
    line = None
    target = os.path.abspath(path)
    for frame, lineno in traceback.walk_tb(tb):
        if os.path.abspath(frame.f_code.co_filename) == target:
            line = lineno
    return line


def load_module(path: str | os.PathLike[str]) -> types.ModuleType:
    """Import a pipeline file as a fresh module. Raises :class:`PipelineFileError`."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise PipelineFileError("no such pipeline file (give the path of a .py file)", path=path)
    name = "edgepipe_pipeline_" + Path(path).stem.replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PipelineFileError("cannot be imported as Python (is it a .py file?)", path=path)
    module = importlib.util.module_from_spec(spec)
    try:
        source = Path(path).read_bytes()
        code = compile(source, path, "exec")
    except SyntaxError as exc:
        raise PipelineFileError(f"syntax error: {exc.msg}", path=path, line=exc.lineno) from None
    except (OSError, ValueError) as exc:
        raise PipelineFileError(f"cannot be read: {exc}", path=path) from None
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise PipelineFileError(
            f"{type(exc).__name__}: {exc}", path=path, line=_line_in(path, exc.__traceback__)
        ) from exc
    return module


def pipeline_function(module: types.ModuleType, path: str) -> typing.Callable[..., Any]:
    fn = getattr(module, "pipeline", None)
    if fn is None:
        raise PipelineFileError(
            "defines no pipeline() function; add `def pipeline(**params) -> Pipeline:`", path=path
        )
    if not callable(fn):
        raise PipelineFileError(f"`pipeline` is a {type(fn).__name__}, not a function", path=path)
    return fn  # type: ignore[no-any-return]


def parameters(fn: typing.Callable[..., Any], *, path: str = "", line: int | None = None) -> list[Param]:
    """The parameters of ``fn`` with their types and constraints. Raises
    :class:`PipelineFileError` when an annotation names what the file does not define (a
    constraint must never be dropped silently)."""
    try:
        hints = _parameter_hints(fn)
    except Exception as exc:
        raise PipelineFileError(
            f"the annotations of pipeline() cannot be read: {type(exc).__name__}: {exc} "
            "(is everything they name imported?)",
            path=path or getattr(fn, "__module__", "?"),
            line=line,
        ) from None
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation, constraints = _constraints(hints.get(p.name, p.annotation))
        if annotation is inspect.Parameter.empty and p.default is not inspect.Parameter.empty:
            annotation = type(p.default) if p.default is not None else str
        out.append(Param(p.name, annotation, p.default, constraints))
    return out


def _parameter_hints(fn: typing.Callable[..., Any]) -> dict[str, Any]:
    """The evaluated annotations of ``fn``'s parameters (its return annotation may name what
    is imported for type checkers only: it is not needed)."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        pass
    namespace = getattr(fn, "__globals__", {})
    hints = {}
    for p in inspect.signature(fn).parameters.values():
        annotation = p.annotation
        if isinstance(annotation, str):  # `from __future__ import annotations`
            annotation = eval(annotation, namespace)  # what get_type_hints does, one at a time
        hints[p.name] = annotation
    return hints


def _constraints(annotation: Any) -> tuple[Any, tuple[Constraint, ...]]:
    """``Annotated[int, Range(1, 9)]`` → ``(int, (Range(1, 9),))``; also inside ``X | None``."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extras = typing.get_args(annotation)
        inner, more = _constraints(base)
        return inner, tuple(e for e in extras if callable(getattr(e, "check", None))) + more
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found: tuple[Constraint, ...] = ()
        for arg in typing.get_args(annotation):
            found += _constraints(arg)[1]
        return annotation, found
    return annotation, ()


def _convert(text: str, annotation: Any) -> Any:
    """Convert one command-line string by a type annotation; ValueError says what was wanted."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _convert(text, typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if type(None) in typing.get_args(annotation) and text.lower() in ("none", "null"):
            return None
        errors = []
        for arg in args:
            try:
                return _convert(text, arg)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(" or ".join(errors))
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        for choice in choices:
            if str(choice) == text:
                return choice
        raise ValueError("one of " + ", ".join(repr(str(c)) for c in choices))
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
        raise ValueError("one of " + ", ".join(repr(m.name) for m in annotation))
    if annotation in (int, float):
        try:
            number = annotation(text)
        except ValueError:
            raise ValueError(f"{'an integer' if annotation is int else 'a number'}") from None
        if math.isnan(number):  # never what anyone means: every comparison with it is False
            raise ValueError("a number")
        return number
    if isinstance(annotation, type):
        try:
            return annotation(text)
        except Exception as exc:
            raise ValueError(f"a {annotation.__name__} ({exc})") from None
    return text


def parse_params(args: list[str], params: list[Param], *, path: str, line: int | None) -> dict[str, Any]:
    """``["--fps", "5", "--debug-boxes"]`` → ``{"fps": 5.0, "debug_boxes": True}``."""
    by_flag = {p.flag: p for p in params}
    by_flag.update({"--" + p.name: p for p in params})
    values: dict[str, Any] = {}
    texts: dict[str, str] = {}

    def fail(message: str) -> typing.NoReturn:
        raise ParameterError(message, path=path, line=line)

    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            fail(f"unexpected argument {arg!r}; pipeline parameters are given as --name value")
        flag, eq, inline_value = arg.partition("=")
        negated = False
        param = by_flag.get(flag)
        if param is None and flag.startswith("--no-"):
            param = by_flag.get("--" + flag[5:])
            negated = param is not None and param.annotation is bool
            if not negated:
                param = None
        if param is None:
            known = sorted({p.flag for p in params})
            hint = difflib.get_close_matches(flag, known, n=1)
            also = f"; did you mean {hint[0]}?" if hint else ""
            listing = ", ".join(known) if known else "none"
            fail(f"unknown parameter {flag}{also} (parameters: {listing})")
        if negated or (
            param.annotation is bool and not eq and (i + 1 >= len(args) or args[i + 1].startswith("--"))
        ):
            values[param.name] = not negated
            i += 1
            continue
        if eq:
            text = inline_value
            i += 1
        else:
            if i + 1 >= len(args):
                fail(f"{flag} needs a value")
            text = args[i + 1]
            i += 2
        texts[param.name] = text
        try:
            values[param.name] = _convert(text, param.annotation)
        except ValueError as exc:
            fail(f"{param.flag}: expected {exc}, got {text!r}")
    missing = [p.flag for p in params if p.required and p.name not in values]
    if missing:
        fail("missing required parameter(s): " + ", ".join(missing))
    for param in params:
        given = param.name in values
        value = values[param.name] if given else param.default
        for constraint in param.constraints:
            try:
                constraint.check(value)
            except ValueError as exc:
                shown = repr(texts.get(param.name, value)) if given else f"{value!r} (its default)"
                fail(f"{param.flag}: expected {exc}, got {shown}")
    return values


def load_pipeline(path: str | os.PathLike[str], args: list[str] | None = None) -> Pipeline:
    """Import the file, call ``pipeline()`` with ``args`` converted, and return the Pipeline.

    Raises :class:`PipelineFileError`, :class:`ParameterError` or :class:`GraphError` (from a
    declaration call), each naming the file and line.
    """
    path = os.fspath(path)
    module = load_module(path)
    fn = pipeline_function(module, path)
    try:
        fn_line: int | None = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        fn_line = None
    values = parse_params(list(args or []), parameters(fn, path=path, line=fn_line), path=path, line=fn_line)
    try:
        result = fn(**values)
    except GraphError:
        raise
    except Exception as exc:
        raise PipelineFileError(
            f"pipeline() raised {type(exc).__name__}: {exc}",
            path=path,
            line=_line_in(path, exc.__traceback__) or fn_line,
        ) from exc
    if not isinstance(result, Pipeline):
        raise PipelineFileError(
            f"pipeline() returned {type(result).__name__}, not a Pipeline; end it with `return p`",
            path=path,
            line=fn_line,
        )
    return result
