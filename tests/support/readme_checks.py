"""What a README command's run must show besides its exit code (tests/support/readme_commands.py finds
and adapts the commands; tests/test_readme_commands.py runs them): the output lines the README
shows under a ``$ `` line, and, for a run, that input moved.

The output a document shows under a ``$ `` line is the command's whole output (stdout and stderr,
blank lines aside), line for line: a line the command prints that the document lacks fails as a
line it shows that the command no longer prints. Where the document leaves lines out it says so
with a line that is only ``...`` (any number of lines, none included, stand there: at the start,
between two shown lines or at the end); ``...`` within a line stands for any text there (a path
in the reader's home). Otherwise the words are checked as written; numbers
and sizes (``1.8 MB``, ``3,000,000,000``) are free, as are runs of spaces and a table's rule (``───``), because timings, file
sizes and the machine's RAM vary from one machine to the next.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .readme_commands import HEALTH_FILE

NUMBER = r"\d+(?:[.,]\d+)*(?: ?[kMGT]i?B\b)?"
ELISION = "..."  # a line of the shown output standing for lines left out


def heartbeats(script_text: str, cwd: Path) -> list[Path]:
    """The heartbeat files the script's runs keep (where they were asked to)."""
    return [cwd / found["path"].strip("'\"") for found in HEALTH_FILE.finditer(script_text)]


def moved(path: Path) -> str | None:
    """Why the run whose last heartbeat is at ``path`` did not move input, or None when it did:
    an item came out of a stage or was finished by a sink (a source's frames alone are not
    enough: they must have reached the pipeline)."""
    try:
        beat = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"no heartbeat from the run ({exc})"
    progress = beat.get("progress") or {}
    if not any(count > 0 for count in progress.values()):
        return f"no item moved past the sources in the run (items out: {beat.get('items_out')}; {progress})"
    return None


def shape(line: str) -> re.Pattern[str]:
    """The line with its numbers (and sizes), runs of spaces and any ``...`` in it free."""
    pattern = ""
    for piece in re.split(rf"(\s+|─+|{re.escape(ELISION)}|{NUMBER})", line.strip()):
        if not piece:
            continue
        if piece == ELISION:
            pattern += ".*?"
        elif piece[0] == "─":  # a table's rule: as wide as its columns' figures
            pattern += "─+"
        elif piece.isspace():
            pattern += r"\s+"
        elif piece[0].isdigit():
            pattern += NUMBER
        else:
            pattern += re.escape(piece)
    return re.compile(pattern)


def output_differs(expected: tuple[str, ...], output: str) -> str | None:
    """Where ``output`` is not the shown ``expected`` (module docstring), or None when it is. No
    shown output (a command the document shows without its output) matches any output."""
    if not expected:
        return None
    printed = [line.strip() for line in output.splitlines() if line.strip()]
    pieces: list[list[str]] = [[]]  # the shown runs of lines between ``...`` lines
    for line in expected:
        if line.strip() == ELISION:
            pieces.append([])
        else:
            pieces[-1].append(line)
    if len(pieces) == 1:
        return _run_differs(pieces[0], printed, 0) or _more(printed, len(pieces[0]))
    first, *middle, last = pieces
    why = _run_differs(first, printed, 0)
    if why is not None:
        return why
    at = len(first)
    for piece in middle:
        found = next((i for i in range(at, len(printed) - len(piece) + 1)
                      if _run_differs(piece, printed, i) is None), None)  # fmt: skip
        if found is None:
            return f"no lines shaped like {piece[0]!r}... after printed line {at}"
        at = found + len(piece)
    if len(printed) - len(last) < at:
        return f"the output ends before the last shown lines ({last[0]!r}...)"
    return _run_differs(last, printed, len(printed) - len(last))


def _run_differs(shown: list[str], printed: list[str], start: int) -> str | None:
    for offset, line in enumerate(shown):
        n = start + offset
        if n >= len(printed):
            return f"the document shows {line!r}, the output has ended (printed line {n + 1})"
        if not shape(line).fullmatch(printed[n]):
            return f"printed line {n + 1} is {printed[n]!r}, the document shows {line!r}"
    return None


def _more(printed: list[str], shown: int) -> str | None:
    if len(printed) <= shown:
        return None
    return (
        f"the output goes on past the document's lines: printed line {shown + 1} is {printed[shown]!r}"
        " (show it, or mark lines left out with a `...` line)"
    )
