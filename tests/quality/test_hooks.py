"""The node features the scheduler and the planner look for are protocols, checked with
``isinstance`` (edgepipe.sched.hooks, edgepipe.runtime.memory_plan.Plannable): never looked up by name,
where a misspelt hook is silently never called and no type checker sees the contract."""

from __future__ import annotations

import ast

from tests.quality.source import ONE_WORKER, PACKAGE, REPO, parse

pytestmark = ONE_WORKER

HOOKS = {"loads_model", "governor_knobs", "plan_memory", "keep_up_interval"}
"""The node hooks declared as protocols."""
LOOKUPS = {"getattr", "hasattr"}


def _lookups_by_name(tree: ast.AST) -> list[tuple[int, str]]:
    """``getattr(x, "plan_memory", ...)`` / ``hasattr(x, "loads_model")``: (line, hook)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in LOOKUPS):
            continue
        name = node.args[1] if len(node.args) > 1 else None
        if isinstance(name, ast.Constant) and name.value in HOOKS:
            found.append((node.lineno, str(name.value)))
    return found


def test_the_lookup_is_seen_in_any_form() -> None:
    source = 'getattr(t, "loads_model", False)\nhasattr(t, "plan_memory")\ngetattr(t, "other", None)\n'
    assert _lookups_by_name(ast.parse(source)) == [(1, "loads_model"), (2, "plan_memory")]


def test_no_node_hook_is_looked_up_by_name() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line} {hook}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, hook in _lookups_by_name(parse(path))
    ]
    assert not found, (
        "node hooks looked up by name: check the protocol with isinstance instead "
        f"(edgepipe.sched.hooks, edgepipe.runtime.memory_plan.Plannable): {found}"
    )
