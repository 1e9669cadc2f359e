"""A node configured by a frozen dataclass, built with its fields as keywords (CONTRIBUTING's rule
8: configuration is a frozen dataclass, never keywords copied onto an object).

The config class is the one list of settings: each field with its type, default and docstring,
each value checked in its ``__post_init__`` (at the door: a setting that cannot work raises
before anything runs). The node's ``__init__`` takes the config, and :func:`configured` gives
it the config's fields as its parameters::

    @dataclass(frozen=True, slots=True)
    class DetectorConfig:
        model: str = "centerface"
        _: KW_ONLY
        every: int = 1  # each field with its docstring below it

    class Detector:
        @configured(DetectorConfig)
        def __init__(self, config: DetectorConfig) -> None:
            self.config = config

    Detector("centerface", every=3)  # builds DetectorConfig("centerface", every=3)

Type checkers read the node's parameters from the config class (a ``ParamSpec`` of its
constructor: a misspelt or mistyped keyword is an error there as at run time), and
``inspect.signature`` and ``help()`` show them: no second list of keywords to keep in step.
A node made from a config already built: ``Node(**keywords(config))`` (the checks run again, and
pass).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
C = TypeVar("C")
N = TypeVar("N")


def configured(
    config: Callable[P, C],
) -> Callable[[Callable[[N, C], None]], Callable[Concatenate[N, P], None]]:
    """Decorate a node's ``__init__(self, config)`` so that it takes ``config``'s parameters (a
    frozen dataclass's fields) and builds the config from them. Raises what the config's checks
    raise, before the decorated ``__init__`` runs."""

    def decorate(init: Callable[[N, C], None]) -> Callable[Concatenate[N, P], None]:
        @functools.wraps(init)
        def build(self: N, /, *args: P.args, **kwargs: P.kwargs) -> None:
            init(self, config(*args, **kwargs))

        # help() and inspect.signature() show the config's fields, not (*args, **kwargs).
        own = inspect.signature(config)
        node = next(iter(inspect.signature(init).parameters.values()))
        build.__signature__ = own.replace(  # type: ignore[attr-defined]
            parameters=[node, *own.parameters.values()], return_annotation=inspect.Signature.empty
        )
        return build

    return decorate


def keywords(config: Any) -> dict[str, Any]:
    """The keywords that build ``config`` (a dataclass) again: each field its constructor takes."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}


__all__ = ["configured", "keywords"]
