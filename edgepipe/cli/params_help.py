"""A pipeline's own parameters on a command line: told apart from the command's options given
after FILE (:func:`own_options`), and in ``edgepipe run FILE --help`` (and ``graph``, ``plan``,
``trace``, :func:`add_parameters`): one line each,
after the command's options, with its flag, type, what its constraints allow, its default and
the help text of the ``Args:`` section of ``pipeline()``'s docstring::

    parameters of pipelines/demo.py:
      camera -> motion and faces -> log, recording and viewers.

      --every INT           run the face detector on one frame in this many (int at least 1;
                            default: 3)
      --detect TEXT         ...
"""

from __future__ import annotations

import argparse
import enum
import inspect
import types
import typing
from pathlib import Path
from typing import Any

from edgepipe.core.errors import PipelineFileError
from edgepipe.deploy.output import numbers_not_options
from edgepipe.pipefile.loader import Param, PipelineFunction, flags_of
from edgepipe.pipefile.params import WritableFile, WritableFolder

_TYPE_WORDS: dict[Any, tuple[str, str]] = {
    int: ("INT", "int"),
    float: ("FLOAT", "float"),
    str: ("TEXT", "text"),
    Path: ("PATH", "path"),
}
"""type → (metavar, the word in the help text)."""


def own_options(options: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """What follows FILE (``args.rest``, the command's ``REMAINDER``): the command's own options
    (``options``: the parser of those a pipeline parameter does not take) are set in ``args``
    where given with a value other than their default, and the rest is returned: the pipeline's
    parameters. A negative number is a value there (``--offset -5``), never an option."""
    given, rest = numbers_not_options(options).parse_known_args(args.rest or [])
    for key, value in vars(given).items():
        if value != options.get_default(key):
            setattr(args, key, value)
    return rest


def add_parameters(parser: argparse.ArgumentParser, spec: PipelineFunction) -> None:
    """Add an argument group listing ``spec``'s parameters to ``parser`` (for its help only:
    pipeline parameters are parsed by :func:`edgepipe.pipefile.loader.parse_params`). Raises
    :class:`PipelineFileError`, before adding any, when a flag of one is taken (the loader
    refuses those already: this is so that ``--help`` never meets argparse's own error)."""
    taken = set(parser._option_string_actions)
    for param in spec.params:
        for flag in flags_of(param):
            if flag in taken:
                raise PipelineFileError(
                    f"pipeline() parameter {param.name!r} would be {flag}, which is taken; rename it",
                    path=spec.path,
                    line=spec.line,
                )
            taken.add(flag)
    about = spec.summary if spec.params else f"{spec.summary} (pipeline() takes no parameters)".lstrip()
    group = parser.add_argument_group(f"parameters of {spec.path}", _escape_text(about) or None)
    for param in spec.params:
        text = _escape(help_text(param))
        if _plain(param.annotation) is bool:
            group.add_argument(param.flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                               help=text)  # fmt: skip
        else:
            group.add_argument(param.flag, metavar=metavar(param), default=argparse.SUPPRESS, help=text)


def print_help(parser: argparse.ArgumentParser, file: str | None, reserved: dict[str, str]) -> int:
    """``parser``'s help with the parameters of the pipeline in ``file`` (when given) after the
    command's own options: exit 0, or 2 when the file cannot be read (the help still printed)."""
    from edgepipe.cli.exits import EXIT_OK, EXIT_USAGE
    from edgepipe.cli.failures import error
    from edgepipe.core.errors import PipelineError
    from edgepipe.pipefile.loader import read_pipeline

    if file is not None:
        try:
            add_parameters(parser, read_pipeline(file, reserved=reserved))
        except PipelineError as exc:
            parser.print_help()
            error(f"{exc} (so its parameters cannot be listed)")
            return EXIT_USAGE
    parser.print_help()
    return EXIT_OK


def metavar(param: Param) -> str:
    """``INT``, ``FLOAT``, ``TEXT``, ``PATH``, ``FILE`` (a :class:`WritableFile`), ``DIR`` (a
    :class:`WritableFolder`), ``{a,b}``."""
    choices = _choices(param.annotation)
    if choices is not None:
        return "{" + ",".join(choices + ["none"] * _none_taken(param)) + "}"
    if any(isinstance(c, WritableFile) for c in param.constraints):
        return "FILE"
    if any(isinstance(c, WritableFolder) for c in param.constraints):
        return "DIR"
    arms = _arms(param.annotation)
    if len(arms) == 1 and arms[0] in _TYPE_WORDS:
        return _TYPE_WORDS[arms[0]][0]
    if len(arms) == 1 and isinstance(arms[0], type):
        return arms[0].__name__.upper()
    return "VALUE"


def help_text(param: Param) -> str:
    """The docstring's text, then in brackets the type, what the constraints allow and the
    default: ``the score a face needs (float in [0, 1]; default: 0.35)``. A constraint that
    names what it takes (``a folder with model.onnx ...``) stands for the type word."""
    allowed = []
    for constraint in param.constraints:
        describe = getattr(constraint, "describe", None)
        if callable(describe):
            allowed.append(str(describe()))
    words = []
    if (
        _choices(param.annotation) is None
        and _plain(param.annotation) is not bool
        and not any(text.startswith(("a ", "an ")) for text in allowed)
    ):
        words.append(
            " or ".join(_TYPE_WORDS.get(arm, ("", _name(arm)))[1] for arm in _arms(param.annotation))
        )
    words += allowed
    if words and _none_taken(param):
        words.append("or none")
    required = param.required or param.none_refused
    default = "required" if required else f"default: {show_value(param.default)}"
    details = "; ".join(part for part in (" ".join(words), default) if part)
    return f"{param.help.rstrip('.')} ({details})" if param.help else details


def show_value(value: Any) -> str:
    """A default as it would be typed: ``none``, ``true``, ``''``, an enum member's name."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    if value == "":
        return "''"
    return str(value)


def _choices(annotation: Any) -> list[str] | None:
    """What a ``Literal`` or an ``Enum`` (also ``... | None``) allows, as typed; else ``None``."""
    arms = _arms(annotation)
    if len(arms) != 1:
        return None
    arm = arms[0]
    if typing.get_origin(arm) is typing.Literal:
        return [str(c) for c in typing.get_args(arm)]
    if isinstance(arm, type) and issubclass(arm, enum.Enum):
        return [m.name for m in arm]
    return None


def _arms(annotation: Any) -> list[Any]:
    """``int | None`` → ``[int]``; ``Annotated[X, ...]`` → ``[X]``; ``int`` → ``[int]``."""
    annotation = _plain(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [_plain(a) for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _none_taken(param: Param) -> bool:
    """Whether ``none`` is a value it takes: ``X | None``, unless a constraint refuses ``None``
    (``ModelFolder``: the parameter is required)."""
    return _optional(param.annotation) and not param.none_refused


def _optional(annotation: Any) -> bool:
    origin = typing.get_origin(_plain(annotation))
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(_plain(annotation))


def _plain(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _name(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return "text"
    return getattr(annotation, "__name__", str(annotation))


def _escape(text: str) -> str:
    """argparse expands ``%(default)s`` in help texts: a ``%`` of the docstring stays one."""
    return text.replace("%", "%%")


def _escape_text(text: str) -> str:
    """A description (a group's): argparse %-formats one only when it holds ``%(prog)``, so
    only then is a ``%`` doubled (else it would show doubled)."""
    return _escape(text) if "%(prog)" in text else text
