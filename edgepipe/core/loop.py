"""Choosing the event loop: uvloop when it is installed, asyncio's own otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


LOOPS = ("auto", "uvloop", "asyncio")
"""The event loops a run may ask for."""


def loop_factory(name: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory for ``asyncio.Runner``: ``auto`` (uvloop if importable), ``uvloop`` or ``asyncio``."""
    if name not in LOOPS:
        raise ValueError(f"unknown event loop {name!r}; use auto, uvloop or asyncio")
    if name != "asyncio":
        try:
            import uvloop
        except ImportError:
            if name == "uvloop":
                raise
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T], *, loop: str = "auto", debug: bool = False) -> T:
    """Run ``main`` to completion on a new loop of the chosen kind."""
    with asyncio.Runner(loop_factory=loop_factory(loop), debug=debug) as runner:
        return runner.run(main)
