from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgepipe.cli.main import main
from edgepipe.infer.footprint import read_weights
from edgepipe.lm.bench import memory_bandwidth, weight_bytes_per_token
from tests.lm.conftest import CONFIG

REPO = Path(__file__).resolve().parents[2]


def test_weight_bytes_per_token_are_every_weight_and_one_embedding_row(tiny_models: dict[str, Path]) -> None:
    model = tiny_models["gqa"] / "model.onnx"
    per_token = weight_bytes_per_token(model)
    # Every matrix once and one embedding row: the parameters minus the rest of the embedding,
    # and the few small tables the graph keeps as initializers (rotary cos/sin: 0.5%).
    assert per_token == pytest.approx(
        4 * (CONFIG.parameters() - (CONFIG.vocab - 1) * CONFIG.hidden), rel=0.01
    )
    weights = read_weights(model)  # the count `edgepipe plan` uses
    assert per_token == weights.nbytes - 4 * CONFIG.vocab * CONFIG.hidden + 4 * CONFIG.hidden


def test_memory_bandwidth_is_plausible() -> None:
    assert 1e9 < memory_bandwidth(size_mb=64, rounds=2) < 2e12


@pytest.mark.slow
def test_bench_lm_command_prints_every_context(
    tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "bench",
                "lm",
                str(tiny_models["gqa"]),
                "--contexts",
                "8,24",
                "--tokens",
                "4",
                "--format",
                "json",
            ]
        )
        == 0
    )
    figures = json.loads(capsys.readouterr().out)
    assert [row["context"] for row in figures["contexts"]] == [8, 24]
    row = figures["contexts"][0]
    assert row["ttft_ms"] > 0
    assert row["decode_tokens_per_s"] > 0
    assert figures["cache"] == "shared"
    energy = figures["energy"]  # joules per generated token, or why not (never a guess)
    assert energy["measurable"] or energy["reason"].startswith("not measurable here (")
    assert main(["bench", "lm", str(tiny_models["gqa"]), "--contexts", "60", "--tokens", "10"]) == 1
    assert "longer than the model's cache buffer" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_lm_script_runs_and_ends_with_its_json_line() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_lm.py"), "--hidden", "64", "--layers", "2", "--heads", "4",
         "--kv-heads", "2", "--ffn", "128", "--vocab", "300", "--contexts", "16,48", "--tokens", "6", "--rounds", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "lm"
    assert list(figures["shapes"]) == ["mha", "gqa"]
    assert figures["shapes"]["mha"]["kv_heads"] == 4
    assert figures["shapes"]["gqa"]["kv_heads"] == 2
    for shape in figures["shapes"].values():
        assert [row["context"] for row in shape["contexts"]] == [16, 48]
        assert all(row["ratio_gqa"] > 0 and row["ratio_concat"] > 0 for row in shape["contexts"])
        assert shape["roofline_fraction"] > 0
    assert "targets: 1.2x the naive loop" in done.stdout
