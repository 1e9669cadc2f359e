"""What ``edgepipe doctor`` finds about one file: its kind, its problems (each with what to do),
and the facts it read on the way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One reason a file will not decode, or will decode wrongly."""

    what: str
    """What is wrong, with the evidence (bytes, offsets, sizes)."""
    fix: str
    """What to do about it."""


@dataclass
class Diagnosis:
    """One file's record (one JSON object of ``--format json``)."""

    path: str
    kind: str
    """What its bytes are (:data:`~edgepipe.deploy.doctor.magic.NAMES`'s keys, ``text``)."""
    extension_kind: str | None
    """What its extension claims, None for an extension doctor does not know."""
    size_bytes: int
    problems: list[Problem] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    unchecked: str = ""
    """Why a check did not finish (the decoder's deadline passed), empty when every check ran:
    such a file is neither healthy nor damaged, and ``doctor`` does not exit 0 for it."""

    def add(self, what: str, fix: str) -> None:
        self.problems.append(Problem(what, fix))

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "extension_kind": self.extension_kind,
            "size_bytes": self.size_bytes,
            "problems": [{"what": p.what, "fix": p.fix} for p in self.problems],
            "details": self.details,
            "unchecked": self.unchecked or None,
        }
