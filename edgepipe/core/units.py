"""Numbers read from text or checked at the door: the one parser of each kind.

- :func:`number`, :func:`whole`: argparse ``type``\\ s for a finite number and a whole number
  within bounds (every command's options);
- :func:`seconds`: an argparse ``type`` for a duration (``--duration``, ``--max-age``);
- :func:`check_seconds`: a duration given in code (``run(duration_s=...)``, a node's settings).

A value that cannot be right is refused with one message naming what was expected and what was
given; argparse adds the option's name and exits 2.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def number(
    what: str, *, above: float | None = None, at_least: float | None = None, at_most: float | None = None
) -> Callable[[str], float]:
    """An argparse type: a finite number within the bounds, else ``expected WHAT, got '...'``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not _within(value, above, at_least, at_most):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


def whole(at_least: int = 1, at_most: int | None = None, *, what: str | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number (``2048``, ``2e3``; ``3.5`` is refused, never rounded)
    from ``at_least`` to ``at_most``, else ``expected WHAT, got '...'``. Digits are read exactly,
    whatever their count (a float would round ``12345678901234567891``)."""
    if what is None:
        what = f"a whole number of at least {at_least}" if at_most is None else (
            f"a whole number from {at_least} to {at_most}")  # fmt: skip

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            try:
                real = float(text)
            except ValueError:
                real = math.nan
            value = int(real) if math.isfinite(real) and real == int(real) else None  # type: ignore[assignment]
        if value is None or value < at_least or (at_most is not None and value > at_most):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


def seconds(
    *, above: float | None = None, at_least: float | None = None, at_most: float | None = None
) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds within the bounds, else ``expected a finite
    number of seconds above 0, got '...'`` (the bounds as given)."""
    return number(f"a finite number of seconds {_bounds(above, at_least, at_most)}", above=above,
                  at_least=at_least, at_most=at_most)  # fmt: skip


def check_seconds(
    name: str, value: object, *, above: float | None = None, at_least: float | None = None
) -> float:
    """``value`` as a float if it is a finite number of seconds within the bounds (a bool is not
    a number here); else ``ValueError``: ``NAME must be a finite number of seconds above 0, got
    VALUE``."""
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and _within(value, above, at_least, None)
    ):
        return float(value)
    raise ValueError(
        f"{name} must be a finite number of seconds {_bounds(above, at_least, None)}, got {value!r}"
    )


def _within(value: float, above: float | None, at_least: float | None, at_most: float | None) -> bool:
    return (
        math.isfinite(value)
        and (above is None or value > above)
        and (at_least is None or value >= at_least)
        and (at_most is None or value <= at_most)
    )


def _bounds(above: float | None, at_least: float | None, at_most: float | None) -> str:
    low = (
        f"above {above:g}" if above is not None else f"at least {at_least:g}" if at_least is not None else ""
    )
    high = f"at most {at_most:g}" if at_most is not None else ""
    return " and ".join(part for part in (low, high) if part)


__all__ = ["check_seconds", "number", "seconds", "whole"]
