"""What newcomers copy imports only what edgepipe exports on purpose: the shipped pipelines and
the docs' examples name ``edgepipe`` or a subpackage's ``__all__``, never a module inside it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.quality.source import ONE_WORKER, PACKAGE, REPO, parse

pytestmark = ONE_WORKER

PIPELINES = sorted((REPO / "pipelines").glob("*.py"))


def exported(package: str) -> set[str] | None:
    """The names in the ``__all__`` of ``package``, or of a public module at the package's top
    (``edgepipe.testing``); None for a module inside a package."""
    init = PACKAGE.parent.joinpath(*package.split("."), "__init__.py")
    if not init.exists():
        init = PACKAGE.parent.joinpath(*package.split(".")).with_suffix(".py")
        if len(package.split(".")) != 2 or not init.exists():
            return None
    for node in parse(init).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return {ast.literal_eval(e) for e in getattr(node.value, "elts", [])}
    return set()


def internal_imports(tree: ast.Module, where: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "edgepipe":
            names = exported(node.module or "")
            for alias in node.names:
                if names is None or alias.name not in names:
                    found.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
    return found


def test_the_shipped_pipelines_import_only_public_names() -> None:
    assert PIPELINES
    found = [line for path in PIPELINES for line in internal_imports(parse(path), path.name)]
    assert not found, "import these from edgepipe or the subpackage that exports them:\n" + "\n".join(found)


def test_the_docs_examples_import_only_public_names() -> None:
    found = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for block in re.finditer(r"```python\n(.*?)```", text, re.S):
            try:
                tree = ast.parse(block.group(1))
            except SyntaxError:  # a fragment (an excerpt with "..."): its imports are checked by eye
                continue
            line = text[: block.start()].count("\n") + 2
            found += internal_imports(tree, f"{Path(doc).relative_to(REPO)} (block at line {line})")
    assert not found, "import these from edgepipe or the subpackage that exports them:\n" + "\n".join(found)
