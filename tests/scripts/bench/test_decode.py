from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import make_sample_clip

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_bench_runs_and_ends_with_its_json_line(tmp_path: Path) -> None:
    # A smoke run on a small clip: the performance target lives in the script, not in a test.
    clip = make_sample_clip.make_clip(tmp_path / "c.mp4", width=320, height=240, fps=30, seconds=1)
    result = subprocess.run(
        [sys.executable, "-m", "scripts.bench.decode", "--clip", str(clip), "--rounds", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode in (0, 1), result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "decode"
    assert figures["frames"] == 30
    assert figures["frames_per_s"] > 0
    assert figures["ratio_vs_bare_pyav"] > 0
