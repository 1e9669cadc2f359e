from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe.deploy.plan.model import cache_positions, read_model
from edgepipe.infer.errors import ModelNotFound
from edgepipe.lm import DecoderLayoutError
from tests.deploy.conftest import CONFIG
from tests.support.onnx_builders import add_model


@pytest.mark.parametrize("layout", ["concat", "gqa"])
def test_the_facts_are_read_from_the_onnx_file(tiny_lm_dirs: dict[str, Path], layout: str) -> None:
    facts = read_model(tiny_lm_dirs[layout] / "model.onnx")
    assert (facts.layers, facts.kv_heads, facts.head_dim, facts.heads) == (
        CONFIG.layers,
        CONFIG.kv_heads,
        CONFIG.head_dim,
        CONFIG.heads,
    )
    # The weights, plus the few small tables (rotary cos/sin) the graph keeps as initializers.
    assert CONFIG.parameters() <= facts.params < CONFIG.parameters() * 1.01
    assert facts.dtype == "fp32"
    assert facts.kv_dtype == "fp32"
    assert facts.weight_bytes == pytest.approx(4 * facts.params, rel=0.01)
    concat_note = any("two buffers" in n for n in facts.notes)
    assert concat_note == (layout == "concat")


def test_positions_are_what_the_runner_would_make(tiny_lm_dirs: dict[str, Path]) -> None:
    assert cache_positions(tiny_lm_dirs["concat"], None) == CONFIG.max_seq_len
    assert cache_positions(tiny_lm_dirs["concat"], 40) == 40
    assert cache_positions(tiny_lm_dirs["gqa"], 40) == CONFIG.max_seq_len  # the graph fixes the buffer


def test_what_is_not_a_decoder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        read_model(tmp_path / "missing.onnx")
    with pytest.raises(DecoderLayoutError, match="not a decoder with a KV cache"):
        read_model(add_model(tmp_path / "add.onnx"))


def test_a_float16_cache_is_planned_as_the_runner_allocates_it(tmp_path: Path) -> None:
    from edgepipe.deploy.plan.capacity import kv_terms
    from edgepipe.lm import DecoderRunner
    from scripts import tiny_lm

    folder = tiny_lm.write(tmp_path / "fp16", CONFIG, "gqa", "float16").parent
    facts = read_model(folder)
    assert facts.kv_dtype == "fp16"
    terms = kv_terms(facts, CONFIG.max_seq_len)
    assert terms is not None
    runner = DecoderRunner(folder)
    assert terms.nbytes == runner.cache.nbytes == runner.layout.kv_bytes(CONFIG.max_seq_len)
    assert "x 2 bytes" in terms.formula()


@pytest.mark.parametrize("bits", [4, 8])
def test_a_quantized_decoder_is_read_as_its_packed_format(
    tiny_lm_dirs: dict[str, Path], tmp_path: Path, bits: int
) -> None:
    from edgepipe.deploy.quantize.decoder import quantize_decoder

    quantize_decoder(tiny_lm_dirs["gqa"], tmp_path / "q", bits=bits)  # the float32 embedding is kept
    facts = read_model(tmp_path / "q")
    assert facts.dtype == f"int{bits}"
    assert facts.packed_params > 0.8 * facts.params
    line = facts.weight_format()
    assert line.startswith(f"int{bits} weights ({facts.packed_params:,} of them packed in MatMulNBits; ")
    assert " in fp32)" in line  # the embedding and the norms
    assert "int64" not in line  # a few shape constants are no weight format
