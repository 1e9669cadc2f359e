"""Exits that tell the truth: a source that cannot be opened ends the run with code 1 and one
error line, never an abort (134) from a model still loading or running on a worker thread
(scripts/check_exits.py repeats each case ten times)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("source", ["missing.mp4", "empty.mp4", "folder"])
def test_face_privacy_with_a_source_it_cannot_open_exits_1(
    tmp_path: Path, source: str, centerface: Path
) -> None:
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "folder").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "edgepipe", "run", str(REPO / "pipelines" / "face_privacy.py"),
         "--source", str(tmp_path / source), "--output", str(tmp_path / "out.mp4")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "terminate called" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("edgepipe: error:")]
    assert len(errors) == 1
    assert source in errors[0]
