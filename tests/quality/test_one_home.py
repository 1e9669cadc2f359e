"""Each concern defined once in the package, and the tests' own one-of-each rules."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.quality.source import ONE_WORKER, PACKAGE, REPO, imports, module_name, parse, walk

pytestmark = ONE_WORKER

# One of each: each of these is defined once in the package, where the layers let
# every user reach it, and its users import it. Each rule reads the source (AST), so a copy pasted
# back is caught. concern -> (its one home, the name it defines there, the modules that use it).
ONE_HOME: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "exit codes": ("cli.exits", "EXIT_PROBLEMS", ("cli.memory_plan", "cli.main", "cli.plan")),
    "number parsers": (
        "core.units", "seconds",
        ("cli.run", "cli.health", "cli.doctor", "runner.config", "sinks.events.recorder"),
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
    calls = {_called(n) for n in walk(path)}
    for node in walk(path):
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
        for node in walk(path)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr)
    }  # fmt: skip
    for node in walk(path):  # a command worded by hand, right for one kind of install only
        if isinstance(node, ast.Constant) and "pip install" in str(node.value) and id(node) not in docstrings:
            found.setdefault("install hints", []).append(node.lineno)
    for node in tree.body:  # a module's own lazy loader
        if isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "__dir__"):
            found.setdefault("lazy export", []).append(node.lineno)
    return found


def test_one_definition_of_each() -> None:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
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
            imported = imports(paths[module], set(paths)) | {
                m.rpartition(".")[0] for m in imports(paths[module], set(paths))
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
    helper = REPO / "tests" / "support" / "cli_process.py"
    elsewhere = [
        f"{path.relative_to(REPO)}:{node.lineno}"  # type: ignore[attr-defined]
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path != helper
        for node in walk(path)
        if _runs_the_command(node)
    ]
    assert not elsewhere, (
        f"edgepipe started in a child process without tests/support/cli_process.py: {elsewhere}"
    )
    assert any(_runs_the_command(node) for node in walk(helper))
