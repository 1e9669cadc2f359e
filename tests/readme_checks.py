"""What a README command's run must show besides its exit code (tests/readme_commands.py finds
and adapts the commands; tests/test_readme_commands.py runs them): the output lines the README
shows under a ``$ `` line, in their shape, and, for a run, that input moved."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .readme_commands import HEALTH_FILE

NUMBER = r"\d+(?:\.\d+)?(?: ?[kMGT]i?B\b)?"


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
    """The line with its numbers (and sizes) and runs of spaces free."""
    pattern = ""
    for piece in re.split(rf"(\s+|{NUMBER})", line.strip()):
        if not piece:
            continue
        if piece.isspace():
            pattern += r"\s+"
        elif piece[0].isdigit():
            pattern += NUMBER
        else:
            pattern += re.escape(piece)
    return re.compile(pattern)


def missing_output(expected: tuple[str, ...], output: str) -> str | None:
    """The first line shown that the output lacks (in order), or None."""
    lines = iter(line.strip() for line in output.splitlines())
    for shown in expected:
        pattern = shape(shown)
        if not any(pattern.fullmatch(line) for line in lines):
            return shown
    return None
