from __future__ import annotations

from pathlib import Path

import pytest

from scripts import tiny_lm

CONFIG = tiny_lm.TinyConfig(max_seq_len=64)


@pytest.fixture(scope="session")
def tiny_lm_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A random-weight tiny decoder (4 heads, 2 KV heads) in both cache layouts."""
    root = tmp_path_factory.mktemp("plan_lm")
    return {layout: tiny_lm.write(root / layout, CONFIG, layout).parent for layout in ("concat", "gqa")}
