"""A language model's folder, checked before anything starts.

What edgepipe runs is a folder in the Hugging Face / Optimum layout: ``model.onnx`` (and its
``model.onnx_data`` when the weights are large), ``tokenizer.json``, ``config.json`` (and
``generation_config.json``: the end tokens). :class:`ModelFolder` declares a pipeline parameter
that takes one, so that a wrong ``--model`` is refused at the door (exit 2) with one line that
says what is missing::

    def pipeline(model: Annotated[Path | None, ModelFolder()] = None) -> Pipeline: ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepipe.lm.errors import MissingPackage
from edgepipe.lm.tokenizer import tokenizers_package

EXPORT_HINT = "docs/language-models.md shows how to export one"


def check_packages(model: str | os.PathLike[str]) -> None:
    """Raise :class:`MissingPackage` if the model's files need a package that is not installed
    (a ``tokenizer.json`` needs ``tokenizers``). Cheap: for a constructor, before any loading."""
    path = Path(model)
    tokenizer = (path if path.is_dir() else path.parent) / "tokenizer.json"
    if tokenizer.is_file():
        tokenizers_package(tokenizer)


def folder_problem(folder: Path | None) -> str | None:
    """What keeps ``folder`` from being a model edgepipe can run (None: nothing), worded to
    follow "expected"."""
    if folder is None:
        return f"a folder with an ONNX language model: model.onnx and tokenizer.json ({EXPORT_HINT})"
    if not folder.is_dir():
        return f"a folder with model.onnx and tokenizer.json (there is no folder there; {EXPORT_HINT})"
    missing = [name for name in ("model.onnx", "tokenizer.json") if not (folder / name).is_file()]
    if missing:
        absent = " and no ".join(missing)
        return f"a folder with model.onnx and tokenizer.json (it has no {absent}; {EXPORT_HINT})"
    try:
        check_packages(folder)
    except MissingPackage as exc:
        return f"a model whose files can be read ({exc.reason})"
    return None


@dataclass(frozen=True, slots=True)
class ModelFolder:
    """A pipeline parameter that names a language model's folder: ``model.onnx`` and
    ``tokenizer.json`` in it, and the ``tokenizers`` package installed to read the latter.
    ``None`` (no ``--model`` given) is refused too, saying where to get a model, unless
    ``optional`` (the pipeline has another way to write: a remote engine)."""

    optional: bool = False

    def describe(self) -> str:
        return "a folder with model.onnx and tokenizer.json"

    def check(self, value: Any) -> None:
        if value is None and self.optional:
            return
        problem = folder_problem(None if value is None else Path(value))
        if problem is not None:
            raise ValueError(problem)
