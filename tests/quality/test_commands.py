"""The command line's shape: every subcommand is a module of ``edgepipe/cli`` in one dispatch
table, its failures reach the user through one handler and one form of line, and the deployment
commands use argparse's public API only."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.quality.source import ONE_WORKER, PACKAGE, REPO, module_name, parse, walk

pytestmark = ONE_WORKER

CLI = PACKAGE / "cli"
HANDLER = CLI / "failures.py"
ERROR_LINE = "edgepipe: error:"


def _defines(path: Path, name: str) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in parse(path).body)


def _imported(node: ast.AST) -> set[str]:
    """The top-level packages an import statement names."""
    if isinstance(node, ast.Import):
        return {a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom) and not node.level:
        return {(node.module or "").split(".")[0]}
    return set()


def _subcommand_modules() -> dict[str, Path]:
    """The modules that add a subcommand to ``edgepipe`` (they define ``add_parser(sub)``)."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if _defines(p, "add_parser")}


def test_every_subcommand_is_a_module_of_cli_in_the_one_dispatch_table() -> None:
    elsewhere = sorted(str(p.relative_to(REPO)) for p in _subcommand_modules().values() if p.parent != CLI)
    assert not elsewhere, f"a subcommand of edgepipe is a module of edgepipe/cli, not: {elsewhere}"
    dynamic = sorted(
        str(p.relative_to(REPO)) for p in CLI.glob("*.py") for n in walk(p) if "importlib" in _imported(n)
    )
    assert not dynamic, (
        f"subcommands are dispatched by edgepipe.cli.main.COMMANDS, not imported by name: {dynamic}"
    )
    from edgepipe.cli.main import COMMANDS

    tabled = {command.module.__name__ for command in COMMANDS.values()}
    assert tabled == set(_subcommand_modules()), "edgepipe.cli.main.COMMANDS misses a subcommand's module"


def _strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant of the module, f-strings' literal parts included, but docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in walk(path)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr)
    }  # fmt: skip
    return [
        (node.lineno, node.value)
        for node in walk(path)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_one_error_line_and_one_error_handler() -> None:
    # `edgepipe: error: ...` is worded in one place (masked there), and only the one handler
    # turns what a command lets out (Ctrl-C, an internal error) into an exit code.
    worded = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != HANDLER
        for line, text in _strings(path)
        if ERROR_LINE in text or "internal error" in text
    ]
    assert not worded, f"say it with edgepipe.cli.failures.error (one form, secrets masked): {worded}"
    handlers = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in sorted(CLI.glob("*.py"))
        if path != HANDLER
        for node in walk(path)
        if isinstance(node, ast.ExceptHandler)
        and any(
            isinstance(n, ast.Name) and n.id in {"KeyboardInterrupt", "Exception", "BaseException"}
            for n in ast.walk(node.type or ast.Name(id="BaseException"))
        )
    ]
    assert not handlers, f"what a command lets out is edgepipe.cli.failures.handled's: {handlers}"


def test_the_deployment_commands_use_argparse_public_api_only() -> None:
    # `parser._option_string_actions`, `parser._handle_conflict_resolve(...)`: internals that
    # change between Python versions.
    private = [
        f"{path.relative_to(REPO)}:{node.lineno} .{node.attr}"
        for name, path in _subcommand_modules().items()
        if name.split(".")[-1] in {"plan", "check_ops", "quantize", "compare", "doctor", "trace", "command"}
        for node in walk(path)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
    ]
    assert not private, f"argparse's internals: {private}"
