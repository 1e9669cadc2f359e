"""One home for each wire format (docs/protocol.md): the msgpack schema and the JSON lines are
defined in ``edgepipe/wire/``, each with its version, and nothing else makes their maps or
names their versions again. Read from the source (AST)."""

from __future__ import annotations

import ast
import re

from tests.quality.source import ONE_WORKER, REPO, modules, parse

pytestmark = ONE_WORKER

# format -> (its one home, the name of its version there)
FORMATS = {
    "msgpack messages": ("edgepipe.wire.messages", "SCHEMA_VERSION"),
    "JSON lines": ("edgepipe.wire.results", "RESULTS_VERSION"),
}
VERSION_KEY = "v"
"""The key that carries the version in a message and in a line."""
PROTOCOL = REPO / "docs" / "protocol.md"


def _makes_versioned_maps(tree: ast.Module) -> list[int]:
    """Lines where a map with a ``"v"`` key is written: ``{"v": ...}`` or ``m["v"] = ...``."""
    lines = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value == VERSION_KEY for k in node.keys)
    ]
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        lines.extend(
            t.lineno
            for t in targets
            if isinstance(t, ast.Subscript)
            and isinstance(t.slice, ast.Constant)
            and t.slice.value == VERSION_KEY
        )
    return lines


def _names_bound(tree: ast.Module) -> set[str]:
    """The names a module binds at its top: assigned, defined or imported."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def test_each_format_has_its_version_in_its_home() -> None:
    paths = modules()
    for fmt, (home, version) in FORMATS.items():
        assert home in paths, f"{fmt}: no {home}"
        tree = parse(paths[home])
        defined = {
            t.id: s.value
            for s in tree.body
            if isinstance(s, ast.Assign)
            for t in s.targets
            if isinstance(t, ast.Name)
        }
        assert isinstance(defined.get(version), ast.Constant), f"{fmt}: {home} defines no {version} = N"
        assert _makes_versioned_maps(tree), f"{fmt}: {home} writes no {VERSION_KEY!r} key"
        uses = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert version in uses, f"{fmt}: {home} never writes {version}"


def test_nothing_else_makes_the_formats_maps_or_names_their_versions() -> None:
    homes = {home for home, _ in FORMATS.values()}
    versions = {version for _, version in FORMATS.values()}
    elsewhere: list[str] = []
    for name, path in sorted(modules().items()):
        if name in homes:
            continue
        tree = parse(path)
        where = str(path.relative_to(REPO))
        elsewhere.extend(f"{where}:{line} makes a versioned map" for line in _makes_versioned_maps(tree))
        elsewhere.extend(f"{where} names {v}" for v in sorted(_names_bound(tree) & versions))
    assert not elsewhere, f"the wire formats are made in edgepipe/wire/ only: {elsewhere}"


def test_the_protocol_page_names_the_homes_as_they_are() -> None:
    text = PROTOCOL.read_text(encoding="utf-8")
    named = set(re.findall(r"edgepipe/[\w/]+\.py", text))
    for home, _ in FORMATS.values():
        assert home.replace(".", "/") + ".py" in named, f"docs/protocol.md does not name {home}"
    gone = sorted(p for p in named if not (REPO / p).exists())
    assert not gone, f"docs/protocol.md names files that do not exist: {gone}"
