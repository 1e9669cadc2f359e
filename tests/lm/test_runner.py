from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgepipe.lm import (
    ContextOverflow,
    DecoderLayoutError,
    DecoderRunner,
    LanguageModel,
    SamplingParams,
)
from scripts import tiny_lm
from tests.lm.conftest import CONFIG
from tests.support.onnx_builders import add_model

WEIGHTS = tiny_lm.weights(CONFIG)
TOKENS = [256, *b"Hello, edge world!"]


@pytest.mark.parametrize("layout", ["concat", "gqa"])
def test_logits_match_numpy_through_prefill_chunks_and_decode_steps(
    tiny_models: dict[str, Path], layout: str
) -> None:
    reference = tiny_lm.reference_logits(CONFIG, WEIGHTS, TOKENS)
    runner = DecoderRunner(tiny_models[layout], prefill_chunk=4)
    got = [runner.feed(TOKENS[:10]).copy()]  # three chunks: 4 + 4 + 2
    got += [runner.feed([t]).copy() for t in TOKENS[10:]]
    np.testing.assert_allclose(np.stack(got), reference[9:], atol=1e-4, rtol=0)
    assert runner.layout.cache == ("shared" if layout == "gqa" else "concat")
    np.testing.assert_allclose(  # what the cache holds is what a full recompute would make
        runner.cache.past_view(0, 0, len(TOKENS)).shape, (1, CONFIG.kv_heads, len(TOKENS), CONFIG.head_dim)
    )


def greedy_by_recompute(prompt: list[int], count: int) -> list[int]:
    """The no-cache reference: the whole sequence through numpy again for every token."""
    seq = list(prompt)
    for _ in range(count):
        seq.append(int(np.argmax(tiny_lm.reference_logits(CONFIG, WEIGHTS, seq)[-1])))
    return seq[len(prompt) :]


def test_greedy_equals_full_recompute_and_both_layouts_agree(tiny_models: dict[str, Path]) -> None:
    expected = greedy_by_recompute(TOKENS, 20)
    for layout in ("concat", "gqa"):
        lm = LanguageModel(tiny_models[layout])
        assert list(lm.tokens(TOKENS, SamplingParams(max_new_tokens=20))) == expected, layout


def test_a_seed_reproduces_a_sampled_generation_in_both_layouts(tiny_models: dict[str, Path]) -> None:
    params = SamplingParams(max_new_tokens=25, temperature=0.9, top_k=40, top_p=0.95, seed=7)
    runs = [
        list(LanguageModel(tiny_models[layout]).tokens(TOKENS, params)) for layout in ("concat", "gqa", "gqa")
    ]
    assert runs[0] == runs[1] == runs[2]
    other = list(LanguageModel(tiny_models["gqa"]).tokens(TOKENS, SamplingParams(max_new_tokens=25, temperature=0.9,
                                                                                  top_k=40, top_p=0.95, seed=8)))  # fmt: skip
    assert other != runs[0]


def test_a_request_past_max_seq_len_is_refused_before_any_work(tiny_models: dict[str, Path]) -> None:
    lm = LanguageModel(tiny_models["gqa"])
    runs = lm.runner.session.stats.runs
    with pytest.raises(ContextOverflow, match="max_seq_len=64") as info:
        list(lm.tokens(TOKENS, SamplingParams(max_new_tokens=60)))
    assert (info.value.needed, info.value.limit) == (len(TOKENS) + 60, 64)
    assert lm.runner.session.stats.runs == runs


@pytest.mark.parametrize("layout", ["concat", "gqa"])
def test_or_stopped_at_the_limit_with_a_reason(tiny_models: dict[str, Path], layout: str) -> None:
    lm = LanguageModel(tiny_models[layout])
    out = list(lm.tokens(TOKENS, SamplingParams(max_new_tokens=100, ignore_eos=True), overflow="stop"))
    assert len(TOKENS) + len(out) == 64 + 1  # the last token is picked from the full cache's logits
    assert lm.stats.stop_reason == "max_seq_len"
    assert lm.runner.tokens == 0  # its slot is free again: the cache was full (the count above)


def test_the_cache_is_allocated_once_and_reused(tiny_models: dict[str, Path]) -> None:
    lm = LanguageModel(tiny_models["concat"])
    arena = lm.runner.cache._arena
    assert lm.runner.cache.nbytes == CONFIG.layers * 2 * 2 * CONFIG.kv_heads * 64 * CONFIG.head_dim * 4
    first = list(lm.tokens(TOKENS, SamplingParams(max_new_tokens=8)))
    second = list(lm.tokens(TOKENS, SamplingParams(max_new_tokens=8)))
    assert first == second
    assert lm.runner.cache._arena is arena
    assert lm.runner.cache.device == ("cpu", 0)  # the session's device: host memory on a CPU


def test_a_model_without_a_cache_is_not_a_decoder(tmp_path: Path) -> None:
    with pytest.raises(
        DecoderLayoutError, match=r"no input_ids, attention_mask, logits \(output\), past_key_values"
    ):
        DecoderRunner(add_model(tmp_path / "add.onnx"))


def test_config_json_that_contradicts_the_graph_is_an_error(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    import json
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_models["gqa"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 7
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(DecoderLayoutError, match="num_hidden_layers=7 but the graph has 2"):
        DecoderRunner(folder)


def test_genai_config_json_is_read_and_checked(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    import json
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_models["concat"], folder)
    (folder / "config.json").unlink()
    genai = {"model": {"context_length": 48, "vocab_size": CONFIG.vocab, "eos_token_id": 257,
                       "decoder": {"num_hidden_layers": CONFIG.layers, "head_size": CONFIG.head_dim}}}  # fmt: skip
    (folder / "genai_config.json").write_text(json.dumps(genai))
    runner = DecoderRunner(folder)
    assert runner.max_seq_len == 48  # the context length the export was made for
    genai["model"]["decoder"]["head_size"] = 16  # type: ignore[index]
    (folder / "genai_config.json").write_text(json.dumps(genai))
    with pytest.raises(DecoderLayoutError, match="head_dim=16 but the graph has 32"):
        DecoderRunner(folder)


def test_a_set_cancel_event_stops_a_prompt_between_chunks(tiny_models: dict[str, Path]) -> None:
    import threading

    runner = DecoderRunner(tiny_models["gqa"], prefill_chunk=4)
    stop = threading.Event()
    stop.set()
    runner.feed(TOKENS, cancel=stop)
    assert runner.tokens == 4  # the first chunk ran, the rest did not


def test_prompt_ids_outside_the_vocabulary_are_refused(tiny_models: dict[str, Path]) -> None:
    lm = LanguageModel(tiny_models["gqa"])
    with pytest.raises(ValueError, match=r"prompt token ids must be in 0\.\.319; got \[320, -1\]"):
        list(lm.tokens([1, 320, -1], SamplingParams(max_new_tokens=4)))


def test_a_cache_that_cannot_fit_in_memory_is_refused_before_allocating(tiny_models: dict[str, Path]) -> None:
    from edgepipe.lm import LMError

    with pytest.raises(
        LMError, match=r"KV cache for 4000000000 positions needs .* GB .*pass a smaller max_seq_len"
    ):
        DecoderRunner(tiny_models["concat"], max_seq_len=4_000_000_000)


def test_generation_config_json_gives_the_end_tokens(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    import json
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_models["gqa"], folder)
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [257, 258], "temperature": 0.6})
    )
    assert LanguageModel(folder).tokenizer.eos_ids == (257, 258)


def test_a_genai_style_export_with_a_symbolic_cache_length_runs_on_one_shared_buffer(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    from edgepipe.infer import onnxfile

    folder = tmp_path / "genai"
    shutil.copytree(tiny_models["gqa"], folder)
    data = (folder / "model.onnx").read_bytes()
    assert ("com.microsoft", "GroupQueryAttention") in onnxfile.node_ops(data)
    assert ("com.microsoft", "GroupQueryAttention") not in onnxfile.node_ops(
        (tiny_models["concat"] / "model.onnx").read_bytes()
    )
    # As onnxruntime-genai declares them: the cache length is a name, the buffer ours to size.
    dims = {
        f"{io}.{i}.{kind}": (1, CONFIG.kv_heads, name, CONFIG.head_dim)
        for io, name in (("past_key_values", "past_sequence_length"), ("present", "total_sequence_length"))
        for i in range(CONFIG.layers)
        for kind in ("key", "value")
    }
    (folder / "model.onnx").write_bytes(onnxfile.with_io_dims(data, dims))
    runner = DecoderRunner(folder, max_seq_len=40)
    assert runner.layout.cache == "shared"
    assert runner.layout.model_max_seq is None
    assert runner.cache.length == runner.max_seq_len == 40
    assert runner.cache.nbytes == CONFIG.layers * 2 * CONFIG.kv_heads * 40 * CONFIG.head_dim * 4  # one buffer
    symbolic = LanguageModel(folder, max_seq_len=40)
    fixed = LanguageModel(tiny_models["gqa"])
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    assert list(symbolic.tokens(TOKENS, params)) == list(fixed.tokens(TOKENS, params))
