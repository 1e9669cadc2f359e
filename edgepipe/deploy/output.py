"""What every deployment command shares: ``--format text|json``, exit codes 0/1/2, a progress
bar on stderr for work that takes more than a second, tables for people, and the one-line
message naming the extra to install when an optional package is missing.

Conventions:

- exit 0: done and nothing wrong found; 1: done, and problems were found (a model that
  diverges, an unsupported operator, a file that will not decode) or the work failed; 2: the
  command line or an input is wrong, found before any work.
- ``--format json`` prints one JSON document on stdout and nothing else there; logs and the
  progress bar go to stderr, so ``edgepipe doctor x --format json | jq`` always parses.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from edgepipe.core.redact import redact_text

WIDTH = 100
"""Tables are built to fit 100 columns where stdout is not a terminal."""


class MissingExtra(Exception):
    """An optional package a command needs is not installed; the message names the extra."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` saying ``pip install 'edgepipe[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"{what} needs the {module!r} package: pip install 'edgepipe[{extra}]'") from exc


def add_format(parser: Any) -> None:
    """The ``--format`` option every command has."""
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text for people (default), json for scripts",
    )


def number(
    what: str, *, above: float | None = None, at_least: float | None = None, at_most: float | None = None
) -> Callable[[str], float]:
    """An argparse type: a finite number within the bounds, else ``expected WHAT, got '...'``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (
            math.isfinite(value)
            and (above is None or value > above)
            and (at_least is None or value >= at_least)
            and (at_most is None or value <= at_most)
        ):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


def whole(at_least: int = 1) -> Callable[[str], int]:
    """An argparse type: a whole number (``2048``, ``2e3``) of at least ``at_least``."""
    real = number(f"a whole number of at least {at_least}", at_least=at_least)

    def parse(text: str) -> int:
        value = real(text)
        if value != int(value):
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {at_least}, got {text!r}")
        return int(value)

    return parse


POSITIVE = number("a positive number", above=0)


def print_json(data: Any, out: TextIO | None = None) -> None:
    """One JSON document on stdout (numpy scalars and paths are written as numbers and strings)."""
    print(json.dumps(data, indent=2, default=_plain), file=out or sys.stdout)


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):  # a numpy scalar or array
        return value.tolist()
    return str(value)


def console(out: TextIO | None = None) -> Console:
    """A console for tables on ``out`` (stdout): 100 columns wide when not a terminal."""
    stream = out or sys.stdout
    terminal = stream.isatty()
    return Console(file=stream, width=None if terminal else WIDTH, highlight=False, soft_wrap=False)


def table(
    title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[str] = ()
) -> Table:
    """A plain table: ``right`` names the columns aligned right (numbers)."""
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for name in columns:
        t.add_column(name, justify="right" if name in right else "left", overflow="fold")
    for row in rows:
        t.add_row(*(str(c) for c in row))
    return t


def error(message: str) -> None:
    """``edgepipe: error: MESSAGE`` on stderr, the form every command uses, secrets in URLs
    masked (``edgepipe plan FILE`` opens the pipeline's cameras)."""
    print(redact_text(f"edgepipe: error: {message}"), file=sys.stderr)


@contextlib.contextmanager
def progress(description: str, total: float | None, *, enabled: bool = True) -> Iterator[Progress]:
    """A progress bar on stderr while the block runs (``bar.advance(task)`` or ``bar.update``);
    drawn only where stderr is a terminal, and removed when done. The task id is ``0``."""
    err = Console(stderr=True)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not enabled or not err.is_terminal,
    )
    with bar:
        bar.add_task(description, total=total)
        yield bar
