"""The operator support tables ``edgepipe check-ops --target NAME`` checks a model against.

One TOML file per target in ``edgepipe/deploy/data/ops/``, each naming its ``source`` (the
provider's documented operator list, or ONNX Runtime's kernel registrations) and ``version``.
Under ``[ops."DOMAIN"]`` each operator has the opset versions it is supported at: ``"13+"``
(13 and later), ``"7-12"``, ``"1-10,13+"``, or ``"*"`` where the source gives no range per
operator (then the table's ``min_opset``/``max_opset``, if any, bound them all). ``[notes]``
holds the source's restrictions (``"2D only"``), printed with the operator: a listed operator
may still be refused by its attributes or shapes, which only the target itself can say.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

ONNX_DOMAIN = "ai.onnx"
ALWAYS = frozenset({(ONNX_DOMAIN, "Constant")})
"""Operators ONNX Runtime turns into initializers when it loads a model: no kernel runs them."""


class UnknownTarget(ValueError):
    """A target that has no table (the message suggests the nearest names)."""


@dataclass(frozen=True)
class Table:
    target: str
    title: str
    provider: str
    """ONNX Runtime's name for it (``CUDAExecutionProvider``); empty for a converter (rknn)."""
    kind: str
    """``provider`` (an ONNX Runtime execution provider) or ``converter``."""
    source: str
    version: str
    host_memory: bool
    """True where the target runs in host memory (the CPU): a fallback then costs no copy."""
    ops: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: dict[str, dict[str, str]] = field(default_factory=dict)
    min_opset: int | None = None
    max_opset: int | None = None

    def lookup(self, domain: str, op_type: str, opset: int | None) -> tuple[bool, str]:
        """(supported, why not or the source's note) for ``op_type`` of ``domain`` at ``opset``."""
        domain = domain or ONNX_DOMAIN
        if self.kind == "provider" and (domain, op_type) in ALWAYS:
            return True, "folded into a constant when the model loads"
        spec = self.ops.get(domain, {}).get(op_type)
        note = self.notes.get(domain, {}).get(op_type, "")
        if spec is None:
            return False, f"not in the {self.target} table"
        if opset is None or domain != ONNX_DOMAIN:
            return True, note
        if spec == "*":
            if self.min_opset is not None and opset < self.min_opset:
                return (
                    False,
                    f"opset {opset} is below {self.min_opset}, the oldest the {self.target} table covers",
                )
            if self.max_opset is not None and opset > self.max_opset:
                return (
                    False,
                    f"opset {opset} is past {self.max_opset}, the newest the {self.target} table covers",
                )
            return True, note
        if covers(spec, opset):
            return True, note
        return False, f"supported at opsets {spec}, not at {opset}"


def covers(spec: str, opset: int) -> bool:
    """Whether ``"6-12,13+"``-style ``spec`` includes ``opset``."""
    for part in spec.split(","):
        part = part.strip()
        if part.endswith("+"):
            if opset >= int(part[:-1]):
                return True
        elif "-" in part:
            low, high = part.split("-")
            if int(low) <= opset <= int(high):
                return True
        elif part and opset == int(part):
            return True
    return False


def _table(data: dict[str, Any]) -> Table:
    return Table(
        target=data["target"],
        title=data["title"],
        provider=data.get("provider", ""),
        kind=data["kind"],
        source=data["source"],
        version=data["version"],
        host_memory=bool(data.get("host_memory", False)),
        ops={d: dict(v) for d, v in data.get("ops", {}).items()},
        notes={d: dict(v) for d, v in data.get("notes", {}).items()},
        min_opset=data.get("min_opset"),
        max_opset=data.get("max_opset"),
    )


@cache
def tables() -> dict[str, Table]:
    """Every built-in table by target name."""
    found: dict[str, Table] = {}
    folder = resources.files("edgepipe.deploy") / "data" / "ops"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml") and entry.name != "advice.toml":
            table = _table(tomllib.loads(entry.read_text(encoding="utf-8")))
            found[table.target] = table
    return found


def find_table(name: str) -> Table:
    """The table of target ``name``; :class:`UnknownTarget` naming the nearest otherwise."""
    known = tables()
    table = known.get(name.lower())
    if table is not None:
        return table
    close = difflib.get_close_matches(name.lower(), list(known), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise UnknownTarget(f"--target: no table for {name!r}; {hint}known targets: {', '.join(known)}")
