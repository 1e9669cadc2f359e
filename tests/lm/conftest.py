from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


tiny = _load("make_tiny_lm")
CONFIG = tiny.TinyConfig(max_seq_len=64)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same ~0.4M-parameter model in both cache layouts, 64 positions."""
    root = tmp_path_factory.mktemp("tiny_lm")
    return {layout: tiny.write(root / layout, CONFIG, layout).parent for layout in ("concat", "gqa")}
