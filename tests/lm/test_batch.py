from __future__ import annotations

import logging
from pathlib import Path

import pytest

from edgepipe.lm import LanguageModel, SamplingParams
from edgepipe.lm.batch import Request
from scripts import tiny_lm
from tests.lm.conftest import CONFIG

GREEDY = SamplingParams(max_new_tokens=12, ignore_eos=True)
PROMPTS = [[256, *b"the first camera"], [256, *b"gate"], [256, *b"a long prompt in several chunks here"]]


def alone(model: Path, prompt: list[int], params: SamplingParams = GREEDY) -> list[int]:
    return list(LanguageModel(model, speculate=0).tokens(prompt, params))


def drive(lm: LanguageModel, requests: list[Request]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {id(r): [] for r in requests}
    while lm.decoder.step():
        for r in requests:
            out[id(r)] += lm.decoder.take(r)
    for r in requests:
        out[id(r)] += lm.decoder.take(r)
    return out


@pytest.mark.parametrize("layout", ["concat", "gqa"])
def test_requests_on_slots_write_what_each_writes_alone(tiny_models: dict[str, Path], layout: str) -> None:
    expected = [alone(tiny_models[layout], p) for p in PROMPTS]
    lm = LanguageModel(tiny_models[layout], slots=3, prefill_chunk=8, speculate=0)
    first = lm.decoder.join(PROMPTS[0], GREEDY)
    for _ in range(4):  # the first decodes a while alone ...
        lm.decoder.step()
    late = [lm.decoder.join(p, GREEDY) for p in PROMPTS[1:]]  # ... then two join, one in chunks
    got = drive(lm, [first, *late])
    assert [lm.decoder.take(first)] == [[]]
    assert [got[id(r)] for r in (first, *late)] == expected
    assert [r.stats.stop_reason for r in (first, *late)] == ["max_new_tokens"] * 3
    assert lm.decoder.free_slots == 3
    assert lm.runner.lengths == [0, 0, 0]


@pytest.mark.parametrize("layout", ["concat", "gqa"])
def test_cancelling_one_request_frees_its_slot_and_leaves_the_others(
    tiny_models: dict[str, Path], layout: str
) -> None:
    expected = [alone(tiny_models[layout], p) for p in PROMPTS[:2]]
    lm = LanguageModel(tiny_models[layout], slots=2, speculate=0)
    a, b = (lm.decoder.join(p, GREEDY) for p in PROMPTS[:2])
    for _ in range(4):
        lm.decoder.step()
    b.cancelled = True
    lm.decoder.step()
    assert b.done
    assert b.stats.stop_reason == "cancelled"
    assert lm.decoder.free_slots == 1
    c = lm.decoder.join(PROMPTS[1], GREEDY)  # the freed slot takes a new request at once
    got = drive(lm, [a, c])
    assert [lm.decoder.take(a)] == [[]]
    assert expected[0][: len(a.sequence) - len(PROMPTS[0])] == a.sequence[len(PROMPTS[0]) :]
    assert got[id(c)] == expected[1]


def test_sampling_is_each_requests_own(tiny_models: dict[str, Path]) -> None:
    params = [SamplingParams(max_new_tokens=10, temperature=0.9, seed=s, ignore_eos=True) for s in (1, 2)]
    expected = [alone(tiny_models["gqa"], PROMPTS[0], p) for p in params]
    lm = LanguageModel(tiny_models["gqa"], slots=2, speculate=0)
    requests = [lm.decoder.join(PROMPTS[0], p) for p in params]
    got = drive(lm, requests)
    assert [got[id(r)] for r in requests] == expected
    assert expected[0] != expected[1]


@pytest.mark.parametrize("layout", ["concat", "gqa"])
def test_greedy_speculative_decoding_writes_what_plain_decoding_writes(
    tiny_models: dict[str, Path], layout: str
) -> None:
    # A prompt that repeats itself, so that lookups find drafts and some are kept.
    prompt = [256, *b"a cat sat. a cat sat. a cat"]
    params = SamplingParams(max_new_tokens=30, ignore_eos=True)
    plain = alone(tiny_models[layout], prompt, params)
    lm = LanguageModel(tiny_models[layout], speculate=4)
    assert list(lm.tokens(prompt, params)) == plain
    spec = lm.decoder.speculation
    assert spec.verify_steps > 0
    assert spec.drafted > 0
    assert lm.stats.steps + lm.stats.accepted == len(plain) - 1  # each step wrote 1 + what it kept
    assert list(lm.tokens(prompt, params)) == plain  # and again, on the same slot


def test_a_float16_cache_decodes_and_plans_in_half_the_bytes(tmp_path: Path) -> None:
    folders = {d: tiny_lm.write(tmp_path / d, CONFIG, "gqa", d).parent for d in ("float32", "float16")}
    lms = {d: LanguageModel(f, speculate=0) for d, f in folders.items()}
    assert lms["float16"].runner.layout.kv_dtype == "float16"
    assert lms["float16"].runner.cache.nbytes * 2 == lms["float32"].runner.cache.nbytes
    out = {d: list(lm.tokens(PROMPTS[0], GREEDY)) for d, lm in lms.items()}
    assert out["float16"][:4] == out["float32"][:4]  # half precision keeps greedy choices (early on)
    concat = LanguageModel(tiny_lm.write(tmp_path / "c16", CONFIG, "concat", "float16").parent, slots=2)
    assert concat.runner.cache.element_type.__name__ == "float16"
    assert list(concat.tokens(PROMPTS[0], GREEDY))[:4] == out["float32"][:4]


def test_a_model_with_its_batch_fixed_at_one_runs_one_slot_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import onnx

    folder = tiny_lm.write(tmp_path / "fixed", CONFIG, "gqa").parent
    model = onnx.load(str(folder / "model.onnx"))
    for value in [*model.graph.input, *model.graph.output]:
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_param")
        dim.dim_value = 1
    onnx.save(model, str(folder / "model.onnx"))
    with caplog.at_level(logging.INFO, logger="edgepipe.lm.kv_sizing"):
        lm = LanguageModel(folder, slots=4)
    assert lm.runner.slots == 1
    assert "its batch is fixed at 1, so it decodes one request at a time (slots=1, not 4)" in caplog.text
