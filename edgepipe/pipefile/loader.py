"""Loading a pipeline file and calling its ``pipeline()`` with command-line parameters.

``pipelines/NAME.py`` defines ``def pipeline(**params) -> Pipeline``. Parameters come from the
command line as ``--name value`` (``--name=value``; ``--flag``/``--no-flag`` for a bool) and
from a TOML file (``--params camera.toml``, :mod:`edgepipe.pipefile.params_file`; the command line
wins), and are converted by the function's annotations (:mod:`edgepipe.pipefile.convert`);
``Annotated[int, Range(32, 4096)]`` and the other constraints of :mod:`edgepipe.pipefile.params`
are checked on every value, given or default, before ``pipeline()`` is called. ``--params`` is
reserved for that file: a parameter named ``params`` is refused, as is one whose flag (or a
bool's ``--no-`` flag) is an option of the command (``reserved``) or another parameter's. A
negative number may follow its flag (``--offset -5``); another value that starts with ``-`` is
given as ``--name=-value`` (after a space the command may take it for an option of its own:
``-q``). Every failure is a :class:`PipelineError` that names the file and line; none shows a
traceback of edgepipe's own frames.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import os
import sys
import traceback
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepipe.core.checks import not_a_file
from edgepipe.core.errors import GraphError, ParameterError, PipelineFileError
from edgepipe.graph.pipeline import Pipeline
from edgepipe.pipefile.convert import from_text
from edgepipe.pipefile.docstring import summary
from edgepipe.pipefile.params_file import read_param_file
from edgepipe.pipefile.signature import Param, parameters
from edgepipe.runtime.stopsignals import stop_within

__all__ = ["Param", "PipelineFunction", "load_pipeline", "parameters", "parse_params", "read_pipeline"]

RESERVED_FLAGS: Mapping[str, str] = {"--params": "reserved for a parameter file (--params FILE.toml)"}
"""Flags no pipeline parameter may take, with what they are for."""


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
    if (kind := not_a_file(path)) is not None:
        raise PipelineFileError(f"is {kind}, not a pipeline file (give the path of a .py file)", path=path)
    if not os.path.isfile(path):
        raise PipelineFileError("no such pipeline file (give the path of a .py file)", path=path)
    name = "edgepipe_pipeline_" + Path(path).stem.replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PipelineFileError("cannot be imported as Python (is it a .py file?)", path=path)
    module = importlib.util.module_from_spec(spec)
    try:
        source = Path(path).read_bytes()
        code = compile(source, path, "exec", dont_inherit=True)  # not the loader's own __future__ flags
    except SyntaxError as exc:
        raise PipelineFileError(f"syntax error: {exc.msg}", path=path, line=exc.lineno) from None
    except (OSError, ValueError) as exc:
        raise PipelineFileError(f"cannot be read: {exc}", path=path) from None
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:  # exit 0 from here would say the pipeline ran
        sys.modules.pop(name, None)
        raise PipelineFileError(
            f"called sys.exit({exc.code!r}) at import; nothing ran (a pipeline file only declares: "
            "move the code into pipeline())",
            path=path,
            line=_line_in(path, exc.__traceback__),
        ) from None
    except Exception as exc:
        sys.modules.pop(name, None)
        if (stop := stop_within(exc)) is not None:
            raise stop from None
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


def parse_params(
    args: list[str],
    params: list[Param],
    *,
    path: str,
    line: int | None,
    params_file: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """``["--fps", "5", "--debug-boxes"]`` → ``{"fps": 5.0, "debug_boxes": True}``, over the
    values of ``params_file`` (:func:`~edgepipe.pipefile.params_file.read_param_file`): the command
    line wins, and a file value it overrides is not checked against its constraints (a camera's
    ``output = "/data/out.mp4"`` overridden on a machine without ``/data``)."""
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
            texts[param.name] = "false" if negated else "true"
            i += 1
            continue
        if eq:
            text = inline_value
            i += 1
        else:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                fail(f"{flag} needs a value (one that starts with '-' is given as {flag}=VALUE)")
            text = args[i + 1]
            i += 2
        texts[param.name] = text
        try:
            values[param.name] = from_text(text, param.annotation)
        except ValueError as exc:
            fail(f"{param.flag}: expected {exc}, got {text!r}")
    if params_file is not None:
        values = {**read_param_file(params_file, params, overridden=set(values)), **values}
    missing = [p.flag for p in params if p.required and p.name not in values]
    if missing:
        fail("missing required parameter(s): " + ", ".join(missing))
    for param in params:
        if param.name in values and param.name not in texts:
            continue  # the parameter file's: checked where it was read, naming the file
        given = param.name in values
        value = values[param.name] if given else param.default
        wanted = param.refusal(value)
        if wanted is None:
            continue
        if not given and value is None:  # a default that only says "not given"
            fail(f"{param.flag} is required: {wanted}")
        shown = repr(texts[param.name]) if given else f"{value!r} (its default)"
        fail(f"{param.flag}: expected {wanted}, got {shown}")
    return values


@dataclass(frozen=True)
class PipelineFunction:
    """A pipeline file's ``pipeline()``, imported and read, not called yet (see
    :func:`read_pipeline`)."""

    path: str
    fn: typing.Callable[..., Any]
    line: int | None
    """The line of ``def pipeline``, for messages."""
    params: tuple[Param, ...]

    @property
    def summary(self) -> str:
        """The first paragraph of its docstring, on one line."""
        return summary(getattr(self.fn, "__doc__", None))

    def call(
        self, args: Sequence[str] = (), *, params_file: str | os.PathLike[str] | None = None
    ) -> Pipeline:
        """Call ``pipeline()`` with ``args`` converted over ``params_file``'s values, and return
        the Pipeline. Raises :class:`ParameterError`, :class:`PipelineFileError` or
        :class:`GraphError` (from a declaration call), each naming the file and line."""
        values = parse_params(
            list(args), list(self.params), path=self.path, line=self.line, params_file=params_file
        )
        try:
            result = self.fn(**values)
        except GraphError:
            raise
        except SystemExit as exc:
            raise PipelineFileError(
                f"pipeline() called sys.exit({exc.code!r}); nothing ran (raise an exception to refuse "
                "a parameter: it is shown with its line)",
                path=self.path,
                line=_line_in(self.path, exc.__traceback__) or self.line,
            ) from None
        except Exception as exc:
            if (stop := stop_within(exc)) is not None:
                raise stop from None
            raise PipelineFileError(
                f"pipeline() raised {type(exc).__name__}: {exc}",
                path=self.path,
                line=_line_in(self.path, exc.__traceback__) or self.line,
            ) from exc
        if not isinstance(result, Pipeline):
            raise PipelineFileError(
                f"pipeline() returned {type(result).__name__}, not a Pipeline; end it with `return p`",
                path=self.path,
                line=self.line,
            )
        return result


def read_pipeline(
    path: str | os.PathLike[str], *, reserved: Mapping[str, str] | None = None
) -> PipelineFunction:
    """Import the file and read its ``pipeline()``'s parameters, without calling it.

    ``reserved`` maps flags the caller's own options take to what they are (``{"--port": "an
    option of edgepipe run"}``): a parameter with one of them (a bool's ``--no-name`` too), with
    ``--params`` or with another parameter's, could never be given, so it is refused. Raises
    :class:`PipelineFileError` naming the file and line.
    """
    path = os.fspath(path)
    module = load_module(path)
    fn = pipeline_function(module, path)
    try:
        line: int | None = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        line = None
    params = tuple(parameters(fn, path=path, line=line))
    taken = {**(reserved or {}), **RESERVED_FLAGS}
    for param in params:
        for flag in flags_of(param):
            if flag in taken:
                what = f"would be {flag}, which is" if flag == param.flag else (
                    f"is a bool, so {flag} would set it false, but {flag} is"
                )  # fmt: skip
                raise PipelineFileError(
                    f"pipeline() parameter {param.name!r} {what} {taken[flag]}; rename it",
                    path=path,
                    line=line,
                )
        also = f"also a flag of parameter {param.name!r} ({'/'.join(flags_of(param))})"
        taken.update(dict.fromkeys(flags_of(param), also))
    return PipelineFunction(path, fn, line, params)


def flags_of(param: Param) -> tuple[str, ...]:
    """The flags that give ``param``: ``--name``, and ``--no-name`` for a bool."""
    if param.annotation is bool:
        return param.flag, "--no-" + param.flag[2:]
    return (param.flag,)


def load_pipeline(
    path: str | os.PathLike[str],
    args: Sequence[str] | None = None,
    *,
    params_file: str | os.PathLike[str] | None = None,
) -> Pipeline:
    """Import the file, call ``pipeline()`` with ``args`` converted (over ``params_file``'s
    values: the command line wins), and return the Pipeline.

    Raises :class:`PipelineFileError`, :class:`ParameterError` or :class:`GraphError` (from a
    declaration call), each naming the file and line.
    """
    return read_pipeline(path).call(args or (), params_file=params_file)
