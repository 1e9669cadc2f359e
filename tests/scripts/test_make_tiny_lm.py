from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from edgepipe.core.install import missing
from edgepipe.lm import LanguageModel, SamplingParams
from tests.scripts.blocked import run_without

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_tiny_lm.py"


@pytest.mark.slow
def test_the_script_writes_a_model_the_runner_loads(tmp_path: Path) -> None:
    # What the error of pipelines/describe_scene.py without --model points to.
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "lm"), "--layout", "concat", "--max-seq-len", "32"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "model.onnx: concat layout" in done.stderr
    assert {p.name for p in (tmp_path / "lm").iterdir()} == {"model.onnx", "config.json", "tokenizer.json"}
    lm = LanguageModel(tmp_path / "lm")
    lm.complete("Hi", SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert lm.stats.new_tokens == 3


def test_without_onnx_it_ends_in_one_line_naming_the_install(tmp_path: Path) -> None:
    # onnx comes with the dev extra; blocked here as if it were not installed
    done = run_without("onnx", SCRIPT, str(tmp_path / "lm"))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [missing("onnx", "dev", "scripts/make_tiny_lm.py")]
    assert not (tmp_path / "lm").exists()
