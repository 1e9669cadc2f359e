"""Item types read from a node's annotations, for checking edges before anything runs.

A type is "declared" when the node's code annotates it (``def detect(frame: Frame) ->
Detections``) or the node is given ``in_type=``/``out_type=``. An edge is checked only when both
ends are declared; anything unresolvable counts as undeclared, never as an error.
"""

from __future__ import annotations

import collections.abc as cabc
import functools
import inspect
import types
import typing
from typing import Any

_STREAMS = {
    cabc.AsyncIterator,
    cabc.AsyncIterable,
    cabc.AsyncGenerator,
    cabc.Iterator,
    cabc.Iterable,
    cabc.Generator,
}


def unwrap(target: Any) -> Any:
    """The function inside any layers of ``functools.partial``."""
    while isinstance(target, functools.partial):
        target = target.func
    return target


def _hints(fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # an unresolvable forward reference is just "undeclared"
        return {}


def _code_of(target: Any, kind: str) -> Any:
    """The function whose annotations describe the node: the callable, or a class's method
    (a source object's ``__aiter__``/``__iter__``: ``VideoSource`` yields ``Frame``)."""
    target = unwrap(target)
    if inspect.isfunction(target) or inspect.ismethod(target):
        return target
    names = ("__aiter__", "__iter__") if kind == "source" else ("process", "__call__")
    for name in names:
        method = getattr(target, name, None)
        if method is not None and (inspect.ismethod(method) or inspect.isfunction(method)):
            return method
    return None


def perishable(tp: Any) -> bool:
    """Whether items of ``tp`` lose their worth while they wait (a class attribute
    ``perishable = True``, as :class:`~edgepipe.media.Frame` has): the lanes from a live source
    of them keep the newest only, unless declared otherwise."""
    return isinstance(tp, type) and getattr(tp, "perishable", False) is True


def _stream_item(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in _STREAMS:
        args = typing.get_args(tp)
        return args[0] if args else None
    return None


def _strip_none(tp: Any) -> Any:
    """``X | None`` means "X, or nothing this time" for a stage's return."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
        return typing.Union[tuple(args)]  # noqa: UP007 - built at run time
    return tp


def takes_lane(fn: Any) -> bool:
    """Whether a per-item handler asks for the lane of each item: a second positional
    parameter named ``lane`` (``def process(self, item, lane)``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 and positional[1].name == "lane"


def declared_types(target: Any, kind: str) -> tuple[Any, Any]:
    """``(in_type, out_type)`` from annotations; None where undeclared."""
    fn = _code_of(target, kind)
    if fn is None:
        return None, None
    hints = _hints(fn)
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    in_type = None
    prepare = getattr(unwrap(target), "prepare", None) if kind != "source" else None
    if inspect.ismethod(prepare):
        # A two-step stage takes its items through prepare() (see edgepipe.runtime.inflight.steps).
        first = next(iter(inspect.signature(prepare).parameters.values()), None)
        in_type = _hints(prepare).get(first.name) if first is not None else None
    elif kind != "source" and params:
        in_type = hints.get(params[0].name)
        streamed = _stream_item(in_type) if in_type is not None else None
        if streamed is not None:
            in_type = streamed
    out_type = None
    finish = getattr(unwrap(target), "finish", None) if kind == "stage" else None
    if inspect.ismethod(finish):  # a stage that finishes its results emits what finish() returns
        hints = _hints(finish)
    if kind != "sink" and "return" in hints:
        ret = hints["return"]
        streamed = _stream_item(ret)
        out_type = _strip_none(streamed if streamed is not None else ret)
        if out_type is type(None) or isinstance(out_type, typing.TypeVar):  # a generic: unknown
            out_type = None
    return in_type, out_type


def _members(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _plain(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    return origin if origin is not None else tp


def compatible(out_type: Any, in_type: Any) -> bool:
    """Can an item of ``out_type`` be given to code that takes ``in_type``? Unknown means yes."""
    if out_type is None or in_type is None:
        return True
    if in_type is Any or in_type is object or out_type is Any:
        return True
    accepted = [_plain(t) for t in _members(in_type)]
    for produced in (_plain(t) for t in _members(out_type)):
        if not isinstance(produced, type):
            continue
        if any(not isinstance(a, type) for a in accepted):
            continue
        if not any(issubclass(produced, a) for a in accepted):
            return False
    return True


def type_name(tp: Any) -> str:
    """A short readable name: ``Frame``, ``int | None``, ``list[Detection]``."""
    if tp is None:
        return "-"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__
    return str(tp).replace("typing.", "")
