"""A pipeline function's parameters, as its signature and docstring declare them: name, type,
default, the constraints of ``Annotated[...]`` (:mod:`edgepipe.pipefile.params`) and the help text
of its ``Args:`` section (:mod:`edgepipe.pipefile.docstring`)."""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass
from typing import Any

from edgepipe.core.errors import PipelineFileError
from edgepipe.pipefile.docstring import args_section
from edgepipe.pipefile.params import Constraint


@dataclass(frozen=True)
class Param:
    """One parameter of a pipeline function."""

    name: str
    annotation: Any
    """The type without ``Annotated``'s extras (``int``, ``Path | None``, ``Literal[...]``)."""
    default: Any
    """``inspect.Parameter.empty`` when required."""
    constraints: tuple[Constraint, ...] = ()
    """What ``Annotated[...]`` adds to the type: :class:`~edgepipe.core.checks.Range` …"""
    help: str = ""
    """Its entry in the function's ``Args:`` docstring section; ``""`` when it has none."""

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    @property
    def none_refused(self) -> bool:
        """Its default is ``None`` but a constraint refuses ``None``
        (``Annotated[Path | None, ModelFolder()] = None``): it must be given, as if required."""
        return self.default is None and self.refusal(None) is not None

    def refusal(self, value: Any) -> str | None:
        """What the first constraint that refuses ``value`` wants (its ``ValueError``'s text),
        or ``None`` when all take it."""
        for constraint in self.constraints:
            try:
                constraint.check(value)
            except ValueError as exc:
                return str(exc)
        return None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def parameters(fn: typing.Callable[..., Any], *, path: str = "", line: int | None = None) -> list[Param]:
    """The parameters of ``fn`` with their types, constraints and help texts. Raises
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
    helps = args_section(getattr(fn, "__doc__", None))
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation, constraints = _constraints(hints.get(p.name, p.annotation))
        if annotation is inspect.Parameter.empty and p.default is not inspect.Parameter.empty:
            annotation = type(p.default) if p.default is not None else str
        out.append(Param(p.name, annotation, p.default, constraints, helps.get(p.name, "")))
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
