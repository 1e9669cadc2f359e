"""The shape of ``scripts/`` and of what the code says about itself: the benchmarks' toolkit is
the one home of what it does, the scripts import each other as one package, and no comment tells
the project's history instead of the code's reasons."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.quality.source import ONE_WORKER, PACKAGE, REPO, parse, walk

pytestmark = ONE_WORKER

SCRIPTS = REPO / "scripts"
PROC_HOME = SCRIPTS / "bench" / "proc.py"
CHILD_HOME = SCRIPTS / "bench" / "child.py"
HISTORY = re.compile(r"\bissue[- ]?#?\d|\bonce merged\b|\bbefore issue\b", re.IGNORECASE)
"""A number of the tracker or a merge to come: where the code came from, not why it is so."""


def _scripts() -> list[Path]:
    return sorted(SCRIPTS.rglob("*.py"))


def _proc_paths(tree: ast.AST) -> list[int]:
    """Lines of string literals (plain or f-strings) that name a file under ``/proc``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        first = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else node
        if (
            isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value.startswith("/proc")
        ):
            lines.add(node.lineno)  # type: ignore[attr-defined]
    return sorted(lines)


def test_proc_is_read_in_the_toolkit_only() -> None:
    elsewhere = [
        f"{path.relative_to(REPO)}:{line}"
        for path in _scripts()
        if path != PROC_HOME
        for line in _proc_paths(parse(path))
    ]
    assert not elsewhere, f"read /proc through scripts/bench/proc.py: {elsewhere}"
    assert _proc_paths(parse(PROC_HOME))


def _assigned(node: ast.AST, name: str) -> bool:
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, ast.AnnAssign)
        else []
    )
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def test_the_exit_grace_has_one_home() -> None:
    homes = [
        f"{path.relative_to(REPO)}:{node.lineno}"  # type: ignore[attr-defined]
        for path in _scripts()
        for node in walk(path)
        if _assigned(node, "EXIT_GRACE_S")
    ]
    assert len(homes) == 1, f"EXIT_GRACE_S is defined in scripts/bench/child.py only: {homes}"
    assert homes[0].startswith(f"{CHILD_HOME.relative_to(REPO)}:"), homes


def test_scripts_are_imported_as_one_package() -> None:
    # A bare ``import tiny_lm`` works only with scripts/ on sys.path: the tests, the benchmarks and
    # the tools name them ``scripts.tiny_lm``, so nothing needs pytest's pythonpath or a path hack.
    stems = {p.stem for p in _scripts()} - {"__init__", "__main__"}
    flat = []
    for path in [*_scripts(), *sorted((REPO / "tests").rglob("*.py"))]:
        for node in walk(path):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            flat += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in stems]
    assert not flat, f"import these as scripts.NAME: {flat}"
    assert "pythonpath" not in (REPO / "pyproject.toml").read_text()


def test_no_comment_tells_the_history() -> None:
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for folder in (PACKAGE, SCRIPTS, REPO / "tests")
        for path in sorted(folder.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not found, "say why the code is so, not which issue or merge brought it:\n" + "\n".join(found)
