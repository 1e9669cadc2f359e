"""scripts/check_exits.py and the exit-code tables of docs/command-line.md say the same thing (the script runs
the commands; here only its table is read, in milliseconds)."""

from __future__ import annotations

import re
from pathlib import Path

from edgepipe.cli.exits import TABLE
from scripts import check_exits

COMMAND_LINE = Path(__file__).resolve().parents[2] / "docs" / "command-line.md"


def _table_after(marker: str) -> list[tuple[str, str]]:
    text = COMMAND_LINE.read_text()
    start = text.index(marker)
    rows = []
    for line in text[start:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] in ("case", "code") or set(cells[0]) <= {"-", " "}:
            continue
        rows.append((cells[0], cells[1]))
    return rows


def test_the_docs_list_every_case_of_the_script_with_its_code() -> None:
    cases = check_exits.cases(Path("/t"), Path("/t/clip.mp4"))
    names = [case.name for case in cases]
    assert len(set(names)) == len(names)
    assert _table_after("<!-- exit-cases:") == [(case.name, str(case.expected)) for case in cases]


def test_the_docs_say_what_each_code_means_as_the_exits_module_does() -> None:
    rows = _table_after("## Exit codes")
    assert rows == [(f"`{code}`", meaning) for code, _, meaning in TABLE]
    assert {code for code, _, _ in TABLE} == {0, 1, 2}
    assert all(re.fullmatch(r"[A-Z]+", name) for _, name, _ in TABLE)
