"""Ruff and mypy clean, enforced by the same test command CI runs."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "command",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_clean(command: list[str]) -> None:
    result = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


PACKAGE = REPO / "edgepipe"
MAX_MODULE_LINES = 400


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The edgepipe modules ``path`` imports, at run time or for type checking only."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parse(path)):
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


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these by concern (CONTRIBUTING.md): {long}"


def test_no_import_cycles_not_even_type_only_ones() -> None:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}

    def read() -> dict[str, set[str]]:
        return {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}

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
        tree = parse(path)
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not names & heavy, f"{path.name} imports {names & heavy}"


def test_sinks_import_nothing_from_serve() -> None:
    # Layers point downwards (docs/architecture.md): serve may use sinks, never the reverse.
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    upward = {
        str(p.relative_to(REPO)): sorted(
            m for m in _imports(p, modules) if m.split(".")[:2] == ["edgepipe", "serve"]
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
# A deployment command's own module (deploy/NAME/command.py) belongs to the command line: it may use
# cli's modules (exit codes, a pipeline's parameters in --help, the memory plan's printout).
COMMAND_MODULE = "command"


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
    raise AssertionError(f"edgepipe.{package} is in no layer of tests/test_quality.py: add it")


def test_layers_point_downwards() -> None:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    upward: list[str] = []
    for name, path in sorted(modules.items()):
        parts = name.split(".")
        if len(parts) < 3:  # the package's top: __init__, __main__, testing
            continue
        mine = _layer_of(parts[1])
        for dep in sorted(_imports(path, set(modules))):
            dep_parts = dep.split(".")
            if dep == "edgepipe" or dep_parts[1] in TOP_LEVEL_MODULES:
                if parts[1] != "cli":  # the command line is the top: it may read __version__
                    upward.append(f"{name} -> {dep} (the public API is for users, not the package)")
                continue
            if dep_parts[1] == parts[1]:
                continue
            theirs = _layer_of(dep_parts[1])
            if parts[-1] == COMMAND_MODULE and dep_parts[1] == "cli":
                continue
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
        own = folder.parts and folder.parts[0] not in {"pipelines", "scripts"}
        if own and not (PACKAGE / folder / "__init__.py").exists():
            stray.append(str(test.relative_to(REPO)))
    assert not stray, f"tests in folders the package does not have: {stray}"


# One of each (issue 25): each of these is defined once in the package, where the layers let
# every user reach it, and its users import it. Each rule reads the source (AST), so a copy pasted
# back is caught. concern -> (its one home, the name it defines there, the modules that use it).
ONE_HOME: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "exit codes": ("cli.exits", "EXIT_PROBLEMS", ("cli.run_plan", "cli.main", "deploy.plan.command")),
    "number parsers": (
        "core.units", "seconds",
        ("cli.run", "cli.main", "deploy.doctor.command", "runtime.run", "sinks.events.recorder"),
    ),
    "weight bytes": ("planning.weights", "count", ("infer.footprint",)),
    "a model file's weights": (
        "infer.footprint", "read_weights",
        ("deploy.plan.model", "lm.bench", "lm.reservations", "vision.reservations", "infer.session"),
    ),
    "JSON-lines writer": ("wire.jsonl", "LineWriter", ("wire.results", "sinks.streams.jsonl")),
    "backoff": ("core.backoff", "Backoff", ("runtime.circuit", "media.sources.reconnect", "sinks.mqtt.client")),
    "lazy export": ("core.lazy", "lazy_exports", ("", "sinks", "serve", "sinks.streams")),
    "install hints": (
        "core.install", "install_command", ("deploy.output", "sinks.mqtt.sink", "lm.tokenizer", "deploy.power.sensors"),
    ),
}  # fmt: skip
PARSER_NAMES = {"seconds", "_seconds", "check_seconds", "_check_seconds", "number", "whole"}
THREADS = {"DaemonThreadPool", "Thread", "ThreadPoolExecutor"}


def _called(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return ""


def _doubles(node: ast.AST) -> bool:
    """``x * 2`` or ``2 ** n``: a delay doubled."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mult | ast.Pow)
        and any(isinstance(side, ast.Constant) and side.value == 2 for side in (node.left, node.right))
    )


def _dtype_table(node: ast.AST) -> bool:
    """A dict literal from ONNX type numbers to ``("fp16", 2)``-like pairs."""
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant) and isinstance(k.value, int)
        and isinstance(v, ast.Tuple) and v.elts and isinstance(v.elts[0], ast.Constant) and v.elts[0].value == "fp16"
        for k, v in zip(node.keys, node.values, strict=True)
    )  # fmt: skip


def _definitions(path: Path) -> dict[str, list[int]]:
    """What of ``ONE_HOME``'s concerns ``path`` defines itself: concern -> the lines."""
    tree = parse(path)
    found: dict[str, list[int]] = {}
    calls = {_called(n) for n in ast.walk(tree)}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if isinstance(node, ast.Assign | ast.AnnAssign) and any(
            isinstance(t, ast.Name) and t.id.startswith("EXIT_") for t in targets
        ):
            found.setdefault("exit codes", []).append(line)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in PARSER_NAMES:
            found.setdefault("number parsers", []).append(line)
        if _dtype_table(node) or _called(node) == "initializers":  # a count of weights of its own
            found.setdefault("weight bytes", []).append(line)
        if _called(node) == "min" and any(_doubles(part) for arg in node.args for part in ast.walk(arg)):  # type: ignore[attr-defined]
            found.setdefault("backoff", []).append(line)
        if _called(node) == "uniform":  # a jitter of its own
            found.setdefault("backoff", []).append(line)
    if calls & THREADS and calls & {"encode", "writelines"}:  # a thread of its own writing lines
        found.setdefault("JSON-lines writer", []).append(1)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr)
    }  # fmt: skip
    for node in ast.walk(tree):  # a command worded by hand, right for one kind of install only
        if isinstance(node, ast.Constant) and "pip install" in str(node.value) and id(node) not in docstrings:
            found.setdefault("install hints", []).append(node.lineno)
    for node in tree.body:  # a module's own lazy loader
        if isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "__dir__"):
            found.setdefault("lazy export", []).append(node.lineno)
    return found


def test_one_definition_of_each() -> None:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    # Reading a file's initializers is onnxfile's (the format) and footprint's (the one caller).
    allowed = {"weight bytes": {"edgepipe.infer.onnxfile", "edgepipe.infer.footprint"}}
    elsewhere: dict[str, list[str]] = {}
    for name, path in sorted(paths.items()):
        for concern, lines in _definitions(path).items():
            home = f"edgepipe.{ONE_HOME[concern][0]}"
            if name != home and name not in allowed.get(concern, set()):
                elsewhere.setdefault(concern, []).extend(f"{path.relative_to(REPO)}:{line}" for line in lines)
    assert not elsewhere, f"defined again outside its one home: {elsewhere}"
    for concern, (home, defined, users) in ONE_HOME.items():
        tree = parse(paths[f"edgepipe.{home}"])
        names = {
            t.id
            for n in tree.body
            for t in getattr(n, "targets", [getattr(n, "target", None)])
            if isinstance(t, ast.Name)
        }
        names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert defined in names, f"{concern}: edgepipe.{home} defines no {defined}"
        for user in users:
            module = f"edgepipe.{user}".rstrip(".")
            imported = _imports(paths[module], set(paths)) | {
                m.rpartition(".")[0] for m in _imports(paths[module], set(paths))
            }
            assert f"edgepipe.{home}" in imported, f"{concern}: {module} does not use edgepipe.{home}"


def _runs_the_command(node: ast.AST) -> bool:
    """``sys.executable, "-m", "edgepipe"`` in a list, a tuple or a call's arguments."""
    items = getattr(node, "elts", None) or getattr(node, "args", None)
    if not isinstance(items, list):
        return False
    for first, flag, name in zip(items, items[1:], items[2:], strict=False):
        words = [getattr(flag, "value", None), getattr(name, "value", None)]
        if isinstance(first, ast.Attribute) and first.attr == "executable" and words == ["-m", "edgepipe"]:
            return True
    return False


def test_tests_start_the_command_through_one_helper() -> None:
    # One place for the command line, the environment the child inherits and its timeout.
    helper = REPO / "tests" / "cli_process.py"
    elsewhere = [
        f"{path.relative_to(REPO)}:{node.lineno}"  # type: ignore[attr-defined]
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path != helper
        for node in ast.walk(parse(path))
        if _runs_the_command(node)
    ]
    assert not elsewhere, f"edgepipe started in a child process without tests/cli_process.py: {elsewhere}"
    assert any(_runs_the_command(node) for node in ast.walk(parse(helper)))
