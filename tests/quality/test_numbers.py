"""One home for each number: the headroom and the package's version are written once, and every
user imports them. Read by value from the source (AST), so a copy under another name is caught."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.quality.source import ONE_WORKER, PACKAGE, REPO, imports, modules, parse, walk

pytestmark = ONE_WORKER

HEADROOM_HOME = "edgepipe.core.headroom"
HEADROOM_USERS = (
    "edgepipe.graph.check",
    "edgepipe.graph.pipeline",
    "edgepipe.sched.budget",
    "edgepipe.planning.memory",
    "edgepipe.deploy.plan.device_plan",
)
HEADROOM_VALUES = {0.3, 0.7}
"""The headroom and its complement (the share a run keeps busy)."""
# A 0.3 or a 0.7 that means something else, each named where it is defined:
# (module, constant) -> what it means.
OTHER_MEANINGS = {
    ("edgepipe.runtime.deadlines", "RESULTS_CLOSE_MIN_S"): "seconds the results left get after a stop",
    ("edgepipe.sched.knobs", "PINNED_DUTIES"): "a pinned detector's rungs (shares of its time)",
    ("edgepipe.sched.knobs", "SPARE_DUTIES"): "a second call's rungs (shares of the spare unit)",
    ("edgepipe.deploy.quantize.lm_output", "DEFAULT_MIN_AGREEMENT"): "a quantized model's top-1 floor",
    ("edgepipe.media.portrait", "HEIGHT_FRAC"): "the synthetic portrait's height in the scene",
    ("edgepipe.media.sources.synthetic", "DISC_PATH"): "the synthetic disc's path in the scene",
    ("edgepipe.vision.adapters", "DEFAULT_IOU"): "the overlap at which NMS drops a box",
    ("edgepipe.vision.tracker", "MATCH_IOU"): "the overlap that continues a track",
}


def _constants_holding(path: Path, values: set[float]) -> list[tuple[int, str | None]]:
    """The float literals of ``path`` equal to one of ``values``: ``(line, the module-level
    constant whose value holds it, or None)``."""
    tree = parse(path)
    owner: dict[int, str] = {}
    for statement in tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        value = getattr(statement, "value", None)
        if names and value is not None:
            owner.update((id(node), names[0]) for node in ast.walk(value))
    return [
        (node.lineno, owner.get(id(node)))
        for node in walk(path)
        if isinstance(node, ast.Constant) and type(node.value) is float and node.value in values
    ]


def test_the_headroom_is_written_once() -> None:
    found: set[tuple[str, str]] = set()
    elsewhere: list[str] = []
    for name, path in sorted(modules().items()):
        if name == HEADROOM_HOME:
            continue
        for line, constant in _constants_holding(path, HEADROOM_VALUES):
            if constant is not None and (name, constant) in OTHER_MEANINGS:
                found.add((name, constant))
            else:
                elsewhere.append(f"{path.relative_to(REPO)}:{line}")
    assert not elsewhere, (
        f"0.3 or 0.7 outside {HEADROOM_HOME}: import HEADROOM (1 - HEADROOM: the share kept busy), "
        f"or name a number of another meaning and add it to OTHER_MEANINGS: {elsewhere}"
    )
    assert found == set(OTHER_MEANINGS), f"gone from the package: {set(OTHER_MEANINGS) - found}"


def test_the_headrooms_users_import_it_from_its_home() -> None:
    paths = modules()
    assert [c for _, c in _constants_holding(paths[HEADROOM_HOME], HEADROOM_VALUES)] == ["HEADROOM"]
    missing = [user for user in HEADROOM_USERS if HEADROOM_HOME not in imports(paths[user], set(paths))]
    assert not missing, f"these do not import {HEADROOM_HOME}: {missing}"


def test_the_version_is_written_once() -> None:
    # pyproject.toml reads it from edgepipe.__version__; the rest of the package asks the installed
    # package's metadata (a lower layer cannot import the package's top).
    top = parse(PACKAGE / "__init__.py")
    [version] = [
        s.value.value
        for s in top.body
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
        for t in s.targets
        if isinstance(t, ast.Name) and t.id == "__version__"
    ]
    copies = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for name, path in sorted(modules().items())
        if name != "edgepipe"
        for node in walk(path)
        if isinstance(node, ast.Constant) and node.value == version
    ]
    assert not copies, f"edgepipe's version {version!r} written again: {copies}"
