from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_bench_runs_and_ends_with_its_json_line() -> None:
    # A smoke run only: the performance target lives in the script, not in a timed test.
    result = subprocess.run(
        [sys.executable, "-m", "scripts.bench.runtime", "--items", "3000", "--rounds", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode in (0, 1), result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "runtime"
    assert figures["items_per_s"] > 0
    assert figures["ratio_vs_bare_queue"] > 0
    assert set(figures["asyncio"]) == {
        "bare_items_per_s",
        "items_per_s",
        "ratio_vs_bare_queue",
        "per_hop_overhead_us",
        "inline_items_per_s",
        "ratio_vs_inline_queue",
    }
    assert figures["target_ratio"] == 0.8
    assert "asyncio ratio" in result.stdout  # both loops are checked against the target
