from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from edgepipe import Pipeline
from edgepipe.lm import Describe, LanguageModel, SamplingParams
from edgepipe.lm.chat import load_chat
from edgepipe.lm.tokenizer import load_tokenizer
from edgepipe.runner import RunConfig
from edgepipe.testing import FakeSource, ListSink, run_pipeline
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire.results import Message
from scripts.tiny_tokenizer import byte_tokenizer_json
from tests.lm import bpe
from tests.lm.chat_templates import CASES, QWEN25, TODAY, USER


def chat_tokenizer(specials: list[str], processor: Any = None) -> Any:
    """A real byte-level BPE tokenizer with a format's special tokens added (as Qwen's, Llama's
    ... are: after the vocabulary)."""
    from tokenizers import AddedToken

    tok = bpe.trained("bytelevel")
    tok.add_special_tokens([AddedToken(s, special=True) for s in specials])
    if processor is not None:
        tok.post_processor = processor
    return tok


def write_settings(folder: Path, **settings: Any) -> None:
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))


def folder_with(tok: Any, folder: Path, **settings: Any) -> Path:
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    write_settings(folder, **settings)
    return folder


@pytest.mark.parametrize("name", list(CASES))
def test_each_format_writes_the_prompt_its_template_renders(name: str, tmp_path: Path) -> None:
    template, bos, specials, end, want = CASES[name]
    tok = chat_tokenizer(specials)
    folder = folder_with(tok, tmp_path / "m", chat_template=template, bos_token=bos)
    fmt = load_chat(folder, tok.token_to_id)
    assert fmt is not None
    text = fmt.render(USER)
    # The expected prompts are Jinja's rendering of the templates; only the date is today's.
    assert text == want.replace(TODAY, time.strftime("%d %b %Y"))
    assert fmt.end_token == end
    assert fmt.end_id == tok.token_to_id(end)
    ids = load_tokenizer(folder, 400).encode(text)
    assert ids == tok.encode(text, add_special_tokens=False).ids
    for special in specials:  # each marker one token, never spelled out in pieces
        if special in text:
            assert tok.token_to_id(special) in ids
    # The start token where the template writes bos_token, once; nowhere else.
    assert fmt.bos == (bos if "bos_token" in template else "")
    if fmt.bos:
        assert ids[0] == tok.token_to_id(bos)
        assert ids.count(ids[0]) == 1


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("qwen2.5", "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
        ("llama3.1", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
                     "2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
        ("llama3", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
        ("phi3.5", "<|system|>\n Be brief. <|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"),
        ("phi4-mini", "<|system|> Be brief. <|end|><|user|>Hi<|end|><|assistant|>"),
        ("gemma2", "<bos><start_of_turn>user\n Be brief. \n\nHi<end_of_turn>\n<start_of_turn>model\n"),
    ],
)  # fmt: skip
def test_a_system_text_takes_the_place_of_the_default(name: str, want: str, tmp_path: Path) -> None:
    template, bos, specials, _, _ = CASES[name]
    tok = chat_tokenizer(specials)
    fmt = load_chat(folder_with(tok, tmp_path / "m", chat_template=template, bos_token=bos), tok.token_to_id)
    assert fmt is not None
    # Jinja's rendering, except Gemma's: Gemma 2 refuses a system turn, edgepipe puts it
    # before the user's text as Gemma 3's template does.
    assert fmt.render("Hi", system=" Be brief. ") == want


def test_the_template_may_come_as_its_own_file_or_one_of_several(tmp_path: Path) -> None:
    tok = chat_tokenizer(["<|im_start|>"])
    apart = folder_with(tok, tmp_path / "apart")
    (apart / "chat_template.jinja").write_text(QWEN25)
    several = folder_with(tok, tmp_path / "several", chat_template=[
        {"name": "tool_use", "template": "{{ nothing }}"}, {"name": "default", "template": QWEN25}])  # fmt: skip
    for folder in (apart, several):
        fmt = load_chat(folder, tok.token_to_id)
        assert fmt is not None
        assert fmt.default_system == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def test_a_template_edgepipe_does_not_know_leaves_the_prompt_as_written(
    tiny_models: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tok = chat_tokenizer([])
    folder = bpe.model_with(tok, tiny_models["gqa"], tmp_path / "m")
    mistral = "{{ bos_token }}{% for m in messages %}{{ '[INST] ' + m['content'] + ' [/INST]' }}{% endfor %}"
    write_settings(folder, chat_template=mistral)
    with caplog.at_level(logging.INFO, logger="edgepipe.lm.chat"):
        lm = LanguageModel(folder)
    try:
        assert lm.chat is None
        lines = [r.getMessage() for r in caplog.records if r.name == "edgepipe.lm.chat"]
        assert len(lines) == 1
        assert "prompts go to the model as written" in lines[0]
        assert lm.prompt_ids("hello", chat=True) == lm.prompt_ids("hello") == tok.encode("hello").ids
        # A format's markers in a template whose tokenizer lacks them are not that format.
        assert load_chat(folder_with(tok, tmp_path / "n", chat_template=QWEN25), tok.token_to_id) is None
    finally:
        lm.close()


def test_the_start_token_comes_once_as_hugging_face_puts_it(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    from tokenizers import processors

    name = "<|begin_of_text|>"
    template, _, specials, _, _ = CASES["llama3"]
    tok = chat_tokenizer(specials)
    bos = tok.token_to_id(name)
    # Llama 3: the post-processor puts the start token first, and config.json names it too.
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{name} $A", special_tokens=[(name, bos)]),
    ])  # fmt: skip
    folder = bpe.model_with(tok, tiny_models["gqa"], tmp_path / "llama")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "bos_token_id": bos}))
    write_settings(folder, chat_template=template, bos_token=name)
    lm = LanguageModel(folder)
    try:
        raw, chat = lm.prompt_ids("hello"), lm.prompt_ids("hello", chat=True)
        assert raw == [bos, *tok.encode("hello", add_special_tokens=False).ids]
        assert chat[0] == bos
        assert chat.count(bos) == 1
    finally:
        lm.close()
    # Qwen: config.json names <|endoftext|> as bos_token_id, but its tokenizer adds none.
    qwen = chat_tokenizer(["<|im_start|>"])
    folder = bpe.model_with(qwen, tiny_models["gqa"], tmp_path / "qwen")
    config = json.loads((folder / "config.json").read_text())
    endoftext = qwen.token_to_id("<|endoftext|>")
    config = {**config, "bos_token_id": endoftext}
    write_settings(folder, chat_template=QWEN25, bos_token=None)
    assert load_tokenizer(folder, 400, config).bos_id is None
    write_settings(folder, chat_template=QWEN25, add_bos_token=True, bos_token="<|im_start|>")
    assert load_tokenizer(folder, 400, config).bos_id == qwen.token_to_id("<|im_start|>")  # as it says
    (folder / "tokenizer_config.json").unlink()  # no tokenizer_config.json: config.json's, as before
    assert load_tokenizer(folder, 400, config).bos_id == endoftext


def test_the_byte_test_models_keep_their_start_token(tiny_models: dict[str, Path]) -> None:
    lm = LanguageModel(tiny_models["gqa"])
    try:
        assert lm.chat is None
        assert lm.prompt_ids("hi", chat=True) == [256, *b"hi"]  # tiny_lm's <bos>, then the bytes
    finally:
        lm.close()


def chatml_model(tiny: Path, folder: Path, end_id: int, start_id: int, eos: list[int]) -> Path:
    """The tiny model with a byte tokenizer plus ChatML's tokens at the ids given, its
    config.json ending on ``eos``, and Qwen2.5's template."""
    shutil.copytree(tiny, folder)
    specials = {"<bos>": 256, "<eos>": 257, "<pad>": 258, "<|im_start|>": start_id, "<|im_end|>": end_id}
    (folder / "tokenizer.json").write_text(json.dumps(byte_tokenizer_json(specials)))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "bos_token_id": None, "eos_token_id": eos}))
    write_settings(folder, chat_template=QWEN25, bos_token=None, eos_token="<|im_end|>")
    return folder


def first_picks(lm: LanguageModel, prompt: list[int], count: int) -> list[int]:
    return list(lm.tokens(prompt, SamplingParams(max_new_tokens=count, ignore_eos=True)))


def test_the_end_of_turn_token_ends_the_answer(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    # The untrained model's first pick after a one-token prompt: find a prompt whose pick is
    # no byte and no tiny_lm special, and make that id ChatML's <|im_end|>.
    probe = LanguageModel(tiny_models["gqa"])
    try:
        picks = {t: first_picks(probe, [t], 1)[0] for t in range(64)}
    finally:
        probe.close()
    prompt, end = next(([t], pick) for t, pick in picks.items() if pick > 258)
    start = 259 if end != 259 else 260
    folder = chatml_model(tiny_models["gqa"], tmp_path / "m", end, start, eos=[257])  # config: <eos> only
    lm = LanguageModel(folder)
    try:
        assert lm.tokenizer.eos_ids == (257,)
        assert end in lm.stop_ids
        assert list(lm.tokens(prompt, SamplingParams(max_new_tokens=8))) == [end]
        assert lm.stats.stop_reason == "stop_token"
        assert lm.complete(prompt, SamplingParams(max_new_tokens=8)) == ""
    finally:
        lm.close()
    (folder / "tokenizer_config.json").unlink()  # no chat format: <|im_end|> is just a token
    lm = LanguageModel(folder)
    try:
        assert end not in lm.stop_ids
        ids = list(lm.tokens(prompt, SamplingParams(max_new_tokens=4)))
        assert ids[0] == end
        assert len(ids) > 1
    finally:
        lm.close()


def test_describe_sends_its_template_as_the_users_turn(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    folder = chatml_model(tiny_models["gqa"], tmp_path / "m", end_id=260, start_id=259, eos=[257, 260])
    tok = load_tokenizer(folder, 320)
    sink: ListSink[Message] = ListSink()
    p = Pipeline("t")
    # The tiny model has 64 positions: a short turn, and a system text in place of Qwen's long one.
    params = SamplingParams(max_new_tokens=6)
    describe = Describe(folder, template="{frames} frames", every_s=3600, params=params, system="Be brief.")
    faces = [
        Detections("cam", i, None, None, 64, 64, "m", [Detection((0, 0, 9, 9), 0.9, 0, "face")])
        for i in range(3)
    ]
    src = p.source("faces", FakeSource(faces))
    p.sink("out", sink, inputs=p.stage("describe", describe, inputs=src, policy="latest", queue_size=4))
    run_pipeline(p, RunConfig(governed=False))
    event = sink.items[-1].data
    assert sink.items[-1].kind == "event"
    assert event["prompt"] == "3 frames"  # the template as written, the event says
    want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n3 frames<|im_end|>\n<|im_start|>assistant\n"
    assert event["prompt_tokens"] == len(tok.encode(want))
    assert event["text"] == "".join(m.data["text"] for m in sink.items[:-1])
    assert 1 <= event["new_tokens"] <= 6
