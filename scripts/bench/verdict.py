"""How a benchmark ends: each target on a line (``PASS`` or ``MISS``, its name, the figure behind
it), then one JSON object as the last line, which holds every figure and ``ok``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Verdicts = dict[str, tuple[bool, Any]]
"""A target's name -> (met, the figure behind it)."""


def print_targets(
    verdicts: Verdicts, title: str = "targets:", *, width: int = 48, show: Callable[[Any], str] = str
) -> bool:
    """Print the targets under ``title``, each figure through ``show``: whether all are met."""
    print(f"\n{title}")
    for name, (met, figure) in verdicts.items():
        print(f"  {'PASS' if met else 'MISS'}  {name:{width}} {show(figure)}")
    return all(met for met, _ in verdicts.values())


def targets_json(verdicts: Verdicts) -> dict[str, dict[str, Any]]:
    """The targets as the JSON line holds them: name -> ``{"ok": met, "figure": figure}``."""
    return {name: {"ok": met, "figure": figure} for name, (met, figure) in verdicts.items()}
