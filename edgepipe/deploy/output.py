"""What every deployment command shares: ``--format text|json``, a progress
bar on stderr for work that takes more than a second, tables for people, and the one-line
message naming the extra to install when an optional package is missing.

Conventions:

- the commands are the command line's (``edgepipe/cli/NAME.py``): their error lines and exit
  codes are its own (exit 1 when the work was done and found problems: a model that diverges,
  an unsupported operator, a file that will not decode).
- ``--format json`` prints one JSON document on stdout and nothing else there; logs and the
  progress bar go to stderr, so ``edgepipe doctor x --format json | jq`` always parses.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import re
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from edgepipe.core.install import missing
from edgepipe.core.units import number, whole

WIDTH = 100
"""Tables are built to fit 100 columns where stdout is not a terminal."""


class MissingExtra(Exception):
    """An optional package a command needs is not installed; the message names the extra."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` naming the command that installs ``extra``
    (:func:`edgepipe.core.install.missing`)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(missing(module, extra, what)) from exc


def add_format(parser: argparse.ArgumentParser) -> argparse.Action:
    """The ``--format`` option every command has (its action)."""
    return parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text for people (default), json for scripts",
    )


NEGATIVE_NUMBER = re.compile(r"^-(\.?\d|inf(inity)?$|nan$)", re.IGNORECASE)
"""What argparse should take for a (negative) number, not an option: ``-5``, ``-3e9``, ``-.5``,
``-inf``. Its own pattern takes ``-5`` and ``-0.5`` only, so ``--param-count -3e9`` was read as
an option named ``-3e9`` ("expected one argument") where the type's own message belongs."""


def numbers_not_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make ``parser`` read any argument that looks like a negative number as a value, so that
    ``--opt -3e9`` and ``--opt=-3e9`` get the same answer from the option's type. Safe for a
    parser with no option string that itself looks like a negative number (none of ours: an
    argparse option such as ``-1`` would turn this off, as argparse's own rule does)."""
    parser._negative_number_matcher = NEGATIVE_NUMBER
    return parser


POSITIVE = number("a positive number", above=0)
INPUT_SIDE = whole(32, 4096, what="a side in pixels from 32 to 4096 (the Detector's input_size)")
"""``--input-size`` of ``quantize`` and ``compare``: the Detector's own range (a larger side
would only allocate gigabytes for the warm-up picture)."""


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
