"""Reading the package's source for the quality checks: its modules, their imports, by AST."""

from __future__ import annotations

import ast
import functools
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "edgepipe"

ONE_WORKER = pytest.mark.xdist_group("quality")
"""The checks' mark: one worker runs them all (``--dist loadgroup``), so each file is parsed and
walked once for every check (the caches below are a process's); spread over two workers, each
parsed the package and the tests again."""


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def parse(path: Path) -> ast.Module:
    """``ast.parse`` of a file, tried again on CPython 3.11's spurious "AST constructor recursion
    depth mismatch": its AST builder keeps its depth count in state shared by every thread, and
    a thread printing a traceback at the same time (3.11 parses source lines for the carets) can
    upset it (gh-106905). Seen once in some full runs of the suite, never alone."""
    source = path.read_text(encoding="utf-8")
    for _ in range(4):
        try:
            return ast.parse(source, str(path))
        except SystemError:
            time.sleep(0.05)
    return ast.parse(source, str(path))


def imports(path: Path, modules: set[str]) -> set[str]:
    """The edgepipe modules ``path`` imports, at run time or for type checking only."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in walk(path):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules}


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


@functools.cache
def walk(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``'s tree, walked once for all the checks that read it."""
    return tuple(ast.walk(parse(path)))
