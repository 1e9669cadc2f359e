"""Ruff and mypy clean, enforced by the same test command CI runs (the slow part of the quality
checks: the rest of ``tests/quality`` reads the source by AST and takes milliseconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.quality.source import REPO
from tests.support.cli_process import CHECKOUT

BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHECKOUT)]  # its caches are written in the checkout


@pytest.mark.parametrize(
    "command",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_clean(command: list[str]) -> None:
    result = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
