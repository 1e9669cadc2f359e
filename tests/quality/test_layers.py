"""The shape of the package: layers that point one way, folders that show the architecture
(docs/architecture.md), modules of one concept each."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.quality.source import ONE_WORKER, PACKAGE, REPO, imports, module_name, walk

pytestmark = ONE_WORKER

MAX_MODULE_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these by concern (CONTRIBUTING.md): {long}"


def test_no_import_cycles_not_even_type_only_ones() -> None:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}

    def read() -> dict[str, set[str]]:
        return {name: imports(path, set(paths)) - {name} for name, path in paths.items()}

    graph = read()

    def cycle_from(start: str) -> list[str] | None:
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for dep in graph[node]:
                if dep == start:
                    return [*path, start]
                if dep not in seen:
                    seen.add(dep)
                    stack.append((dep, [*path, dep]))
        return None

    cycles = [c for name in sorted(graph) if (c := cycle_from(name))]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_core_imports_no_media_or_model_runtime() -> None:
    # The graph runtime stays testable in milliseconds, with fakes (docs/architecture.md).
    heavy = {"av", "onnxruntime", "aiortc", "numpy"}
    for path in (PACKAGE / "core").glob("*.py"):
        names = {a.name.split(".")[0] for n in walk(path) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in walk(path) if isinstance(n, ast.ImportFrom)}
        assert not names & heavy, f"{path.name} imports {names & heavy}"


def test_sinks_import_nothing_from_serve() -> None:
    # Layers point downwards (docs/architecture.md): serve may use sinks, never the reverse.
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    upward = {
        str(p.relative_to(REPO)): sorted(
            m for m in imports(p, modules) if m.split(".")[:2] == ["edgepipe", "serve"]
        )
        for p in (PACKAGE / "sinks").rglob("*.py")
    }
    upward = {path: found for path, found in upward.items() if found}
    assert not upward, f"edgepipe.sinks imports edgepipe.serve: {upward}"


# The shape of the package: folders that show the architecture (docs/architecture.md).
TOP_LEVEL_MODULES = {"__init__", "__main__", "testing"}
MAX_MODULES_PER_FOLDER = 20
# Bottom to top: a package imports only from packages on lower rows (or from itself). Packages on
# one row do not import each other.
LAYERS: list[set[str]] = [
    {"core"},
    {"wire"},
    {"planning"},
    {"graph"},
    {"runtime"},
    {"pipefile"},
    {"sched"},
    {"media"},
    {"infer"},
    {"vision", "lm"},
    {"sinks"},
    {"serve"},
    {"runner"},
    {"deploy"},
    {"cli"},
]


def _folders() -> list[Path]:
    return [p for p in [PACKAGE, *PACKAGE.rglob("*")] if p.is_dir() and (p / "__init__.py").exists()]


def test_nothing_loose_at_the_package_top() -> None:
    loose = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in TOP_LEVEL_MODULES)
    assert not loose, f"put these in the package their concern belongs to: {loose}"


def _prefix_families(folder: Path) -> dict[str, list[str]]:
    """Modules sharing the word before their first ``_`` (``mqtt_client``, ``mqtt_topics`` and
    ``mqtt``): three or more of them are a package wanting its folder."""
    stems = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
    families: dict[str, list[str]] = {}
    for stem in stems:
        families.setdefault(stem.split("_")[0], []).append(stem)
    return {word: sorted(names) for word, names in families.items() if len(names) >= 3}


def test_no_prefix_families_and_no_crowded_folders() -> None:
    families = {str(f.relative_to(REPO)): fam for f in _folders() if (fam := _prefix_families(f))}
    assert not families, f"a family of modules by prefix is a folder: {families}"
    crowded = {
        str(f.relative_to(REPO)): n
        for f in _folders()
        if (n := sum(1 for p in f.glob("*.py") if p.stem != "__init__")) > MAX_MODULES_PER_FOLDER
    }
    assert not crowded, f"more than {MAX_MODULES_PER_FOLDER} modules in one folder: {crowded}"


def _layer_of(package: str) -> int:
    for i, row in enumerate(LAYERS):
        if package in row:
            return i
    raise AssertionError(f"edgepipe.{package} is in no layer of tests/quality/test_layers.py: add it")


def test_layers_point_downwards() -> None:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    upward: list[str] = []
    for name, path in sorted(modules.items()):
        parts = name.split(".")
        if len(parts) < 3:  # the package's top: __init__, __main__, testing
            continue
        mine = _layer_of(parts[1])
        for dep in sorted(imports(path, set(modules))):
            dep_parts = dep.split(".")
            if dep == "edgepipe" or dep_parts[1] in TOP_LEVEL_MODULES:
                if parts[1] != "cli":  # the command line is the top: it may read __version__
                    upward.append(f"{name} -> {dep} (the public API is for users, not the package)")
                continue
            if dep_parts[1] == parts[1]:
                continue
            theirs = _layer_of(dep_parts[1])
            if theirs >= mine:
                upward.append(f"{name} -> {dep}")
    assert not upward, "imports that do not point down the layers:\n" + "\n".join(upward)


def test_every_package_is_in_a_layer_and_tests_mirror_the_tree() -> None:
    for folder in PACKAGE.iterdir():
        if (folder / "__init__.py").exists():
            _layer_of(folder.name)
    tests = REPO / "tests"
    stray = []
    for test in tests.rglob("test_*.py"):
        folder = test.parent.relative_to(tests)
        own = folder.parts and folder.parts[0] not in {"pipelines", "scripts", "quality"}
        if own and not (PACKAGE / folder / "__init__.py").exists():
            stray.append(str(test.relative_to(REPO)))
    assert not stray, f"tests in folders the package does not have: {stray}"
