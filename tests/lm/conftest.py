from __future__ import annotations

from pathlib import Path

import pytest

from scripts import tiny_lm

CONFIG = tiny_lm.TinyConfig(max_seq_len=64)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same ~0.4M-parameter model in both cache layouts, 64 positions."""
    root = tmp_path_factory.mktemp("tiny_lm")
    return {layout: tiny_lm.write(root / layout, CONFIG, layout).parent for layout in ("concat", "gqa")}
