from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_bench_runs_and_ends_with_its_json_line(make_clip, centerface: Path) -> None:  # type: ignore[no-untyped-def]
    # A smoke run on a small clip: the performance targets live in the script, not in a test.
    clip = make_clip("bench_detect.mp4", width=640, height=360, fps=15, seconds=1)
    result = subprocess.run(
        [sys.executable, "-m", "scripts.bench.detect", "--clip", str(clip), "--rounds", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "detect"
    assert figures["frames"] == 15
    assert figures["input"] == "640x384"
    assert figures["detections_per_s"] > 0
    assert figures["ratio_vs_bare"] > 0
    assert set(figures["preprocess_ms"]) == {"swscale", "numpy", "onnx_graph", "opencv"}
