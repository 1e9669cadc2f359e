from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgepipe.cli.main import main
from edgepipe.infer.footprint import read_weights
from edgepipe.infer.session import SessionConfig
from edgepipe.lm import batch
from edgepipe.lm.bench import (
    ASSUMED_L3_BYTES,
    cache_sized_mb,
    last_level_cache_bytes,
    logits_cosine,
    memory_bandwidth,
    slot_figures,
    speculation_figures,
    verify_cost,
    weight_bytes_per_token,
)
from edgepipe.lm.generate import LanguageModel
from scripts import tiny_lm
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


def test_the_cache_sized_buffer_is_half_the_last_level_cache_read_from_sysfs(tmp_path: Path) -> None:
    def cache(name: str, level: int, size: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "level").write_text(f"{level}\n")
        (tmp_path / name / "size").write_text(f"{size}\n")

    assert last_level_cache_bytes(tmp_path) == ASSUMED_L3_BYTES  # nothing to read: the assumed 32 MiB
    assert cache_sized_mb(tmp_path / "absent") == 16
    cache("index0", 1, "32K")
    cache("index1", 1, "64K")
    cache("index2", 2, "1024K")
    assert last_level_cache_bytes(tmp_path) == 1 << 20  # no L3 (a Raspberry Pi 4): the L2
    assert cache_sized_mb(tmp_path) == 1  # at least 1 MB
    cache("index3", 3, "8192K")
    (tmp_path / "index4").mkdir()  # a cache whose files cannot be read is skipped
    assert last_level_cache_bytes(tmp_path) == 8 << 20
    assert cache_sized_mb(tmp_path) == 4


def _lm(folder: Path, **kwargs: int) -> LanguageModel:
    return LanguageModel(folder, max_seq_len=CONFIG.max_seq_len, session=SessionConfig(threads=1), **kwargs)


def test_slot_figures_time_the_requests_decoding_together(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The decoder's clock ticks 1 ms a reading, so the order of the TTFTs is the order of the
    # steps, whatever the machine's load (a process paused between the two joins made the
    # first request's TTFT the longer on a busy CI machine).
    ticks = itertools.count()
    monkeypatch.setattr(batch, "time", SimpleNamespace(perf_counter=lambda: next(ticks) / 1000))
    lm = _lm(tiny_models["gqa"], slots=2, speculate=0)
    row = slot_figures(lm, [[5] * 8, [7] * 20], new_tokens=5)
    assert row["slots"] == 2
    assert len(row["requests"]) == 2
    assert row["aggregate_tokens_per_s"] > 0
    for r in row["requests"]:
        assert r["ttft_ms"] > 0
        assert 0 < r["tpot_p50_ms"] <= r["tpot_p95_ms"] <= row["tpot_p95_ms"]
    first, second = row["requests"]
    assert second["ttft_ms"] > first["ttft_ms"]  # its prompt waited behind the first one's
    assert lm.decoder.free_slots == 2
    assert lm.runner.lengths == [0, 0]


def test_verify_cost_rewinds_what_it_timed(tiny_models: dict[str, Path]) -> None:
    lm = _lm(tiny_models["gqa"])
    cost = verify_cost(lm, context=40, width=5, reps=3)
    assert cost["width"] == 5
    assert cost["step1_ms"] > 0
    assert cost["verify_ms"] > 0
    assert cost["ratio"] == pytest.approx(cost["verify_ms"] / cost["step1_ms"], rel=0.01)
    assert lm.runner.lengths == [0]
    with pytest.raises(ValueError, match="does not fit"):
        verify_cost(lm, context=CONFIG.max_seq_len - 2, width=5)


def test_speculation_figures_compare_the_same_greedy_requests(tiny_models: dict[str, Path]) -> None:
    plain, spec = _lm(tiny_models["gqa"], speculate=0), _lm(tiny_models["gqa"], speculate=4)
    figures = speculation_figures(plain, spec, [[65, 66, 67] * 4, [10] * 10], new_tokens=16)
    assert figures["identical"] is True
    # This model's greedy answers to these prompts repeat themselves: drafts were tried and kept.
    assert figures["verify_steps"] > 0
    assert figures["accepted_per_step"] > 0
    assert figures["plain_tokens_per_s"] > 0
    assert figures["spec_tokens_per_s"] > 0
    assert 0 <= figures["acceptance_rate"] <= 1
    assert figures["accepted_per_step"] == pytest.approx(spec.decoder.speculation.accepted_per_step, abs=1e-3)


def test_logits_cosine_is_one_for_the_same_weights_and_less_for_others(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    gqa, concat = _lm(tiny_models["gqa"]), _lm(tiny_models["concat"])
    prompt = list(range(30))
    assert logits_cosine(gqa, concat, prompt) == pytest.approx(1.0, abs=1e-5)  # same weights, two layouts
    other = _lm(tiny_lm.write(tmp_path / "other", replace(CONFIG, seed=1), "gqa").parent)
    assert logits_cosine(gqa, other, prompt) < 0.5  # other random weights
    assert gqa.runner.lengths == [0]


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
                "--slots",
                "1,2",
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
    assert figures["memory_gb_per_s_l3_sized"] > 0
    assert [(r["context"], r["slots"]) for r in figures["slots"]] == [(8, 1), (8, 2), (24, 1), (24, 2)]
    assert all(r["aggregate_tokens_per_s"] > 0 for r in figures["slots"])
    energy = figures["energy"]  # joules per generated token, or why not (never a guess)
    assert energy["measurable"] or energy["reason"].startswith("not measurable here (")
    assert main(["bench", "lm", str(tiny_models["gqa"]), "--contexts", "60", "--tokens", "10"]) == 2
    assert "give --contexts of at most 53" in capsys.readouterr().err  # 53 + 10 + 1 = its 64 positions


@pytest.mark.slow
def test_bench_lm_script_runs_and_ends_with_its_json_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scripts.bench.lm", "--hidden", "64", "--layers", "2", "--heads", "4",
         "--kv-heads", "2", "--ffn", "128", "--vocab", "300", "--contexts", "256,1024", "--tokens", "6", "--rounds", "1", "--spec-prompts", "2",
         "--spec-tokens", "12", "--verify-reps", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "lm"
    assert list(figures["shapes"]) == ["gqa", "mha"]
    assert figures["shapes"]["mha"]["kv_heads"] == 4
    assert figures["shapes"]["gqa"]["kv_heads"] == 2
    for shape in figures["shapes"].values():
        assert [row["context"] for row in shape["contexts"]] == [256, 1024]
        assert all(row["ratio_gqa"] > 0 and row["ratio_concat"] > 0 for row in shape["contexts"])
        assert shape["roofline_fraction"] > 0
        assert shape["speculative"]["identical"] is True  # greedy: speculation writes what plain does
    issue_keys = {  # the issue's JSON keys, numbers (of the first shape, gqa by default)
        "quant": ("int8_over_fp32", "int4_over_fp32", "int8_cosine", "int4_cosine"),
        "slots": ("agg_4_over_1_ctx256", "agg_4_over_1_ctx1024", "tpot_p95_4_over_1"),
        "speculative": ("verify5_over_step1", "net_over_plain", "accepted_per_step"),
        "roofline": ("dram_fraction", "dram_gb_s", "l3_sized_gb_s"),
    }
    for section, keys in issue_keys.items():
        for key in keys:
            value = figures[section][key]
            assert isinstance(value, (int, float)), (section, key)
            assert value >= 0, (section, key)
    assert figures["quant"]["int8_cosine"] > 0.9  # a quantized model, not another one
    assert "energy_j_per_token" in figures
    assert "target gqa runner >= 1.2x the naive loop" in done.stdout
    assert "target mha int4 >= 2.5x fp32" in done.stdout
