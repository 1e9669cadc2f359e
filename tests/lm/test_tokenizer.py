from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from edgepipe.core.install import install_command
from edgepipe.lm import LanguageModel, MissingPackage, SamplingParams, TokenizerMismatch
from edgepipe.lm.tokenizer import ByteTokenizer, HFTokenizer, load_tokenizer
from tests.lm import bpe

TEXTS = [
    "café ☕ 日本",
    "hello world, héllo wörld 日本語 emoji 😀 the quick brown fox",
    " two  spaces\nand a line",
]


def _streamed(tokenizer: HFTokenizer | ByteTokenizer, ids: list[int]) -> list[str]:
    stream = tokenizer.text_stream()
    return [stream.push(i) for i in ids] + [stream.flush()]


def _whole_characters(piece: str) -> None:
    piece.encode("utf-8")  # a lone surrogate (half a character) would fail here
    assert "\ufffd" not in piece  # nor was a character cut into replacement marks


def test_a_byte_stream_never_splits_a_character() -> None:
    tokenizer = ByteTokenizer()
    text = "naïve café 🙂 ok"
    pieces = _streamed(tokenizer, tokenizer.encode(text))
    assert "".join(pieces) == text
    for piece in pieces:
        _whole_characters(piece)
    start = text.encode().index("🙂".encode())
    assert pieces[start : start + 4] == ["", "", "", "🙂"]  # held back until the character is whole


@pytest.mark.parametrize("style", ["bytelevel", "metaspace"])
@pytest.mark.parametrize("text", TEXTS)
def test_a_real_tokenizer_streams_exactly_what_it_decodes(style: str, text: str, tmp_path: Path) -> None:
    bpe.trained(style).save(str(tmp_path / "tokenizer.json"))
    tokenizer = load_tokenizer(tmp_path, 1000)
    assert isinstance(tokenizer, HFTokenizer)
    ids = tokenizer.encode(text)
    pieces = _streamed(tokenizer, ids)
    # What the tokenizer's own decoder writes, to the space: a SentencePiece tokenizer drops
    # the first token's leading space, a byte-level one writes every byte back.
    assert "".join(pieces) == tokenizer.decode(ids)
    assert tokenizer.decode(ids).strip() == text.strip()
    for piece in pieces:
        _whole_characters(piece)


def test_multi_byte_characters_come_out_whole_when_their_bytes_are_separate_tokens(tmp_path: Path) -> None:
    tok = bpe.trained("bytelevel")
    tok.save(str(tmp_path / "tokenizer.json"))
    tokenizer = load_tokenizer(tmp_path, 1000)
    assert isinstance(tokenizer, HFTokenizer)
    # ☕ (e2 98 95) as its three bytes, a token each: 'â', 'ĺ', 'ķ' in GPT-2's byte alphabet
    ids = [tok.token_to_id(ch) for ch in "âĺķ"]
    assert None not in ids
    pieces = _streamed(tokenizer, ids)
    assert pieces == ["", "", "☕", ""]


def test_special_tokens_are_no_text(tmp_path: Path) -> None:
    tok = bpe.trained("bytelevel")
    tok.save(str(tmp_path / "tokenizer.json"))
    tokenizer = load_tokenizer(tmp_path, 1000)
    assert isinstance(tokenizer, HFTokenizer)
    ids = [*tokenizer.encode("café"), tok.token_to_id("<|im_end|>"), *tokenizer.encode(" 日本")]
    assert "".join(_streamed(tokenizer, ids)) == "café 日本"


def test_a_dangling_partial_character_ends_as_a_replacement_mark(tmp_path: Path) -> None:
    tok = bpe.trained("bytelevel")
    tok.save(str(tmp_path / "tokenizer.json"))
    tokenizer = load_tokenizer(tmp_path, 1000)
    assert isinstance(tokenizer, HFTokenizer)
    ids = [*tokenizer.encode("ok "), tok.token_to_id("â")]  # the first byte of ☕, and then the end
    pieces = _streamed(tokenizer, ids)
    assert pieces[-2:] == ["", "\ufffd"]
    assert "".join(pieces) == tokenizer.decode(ids)


class _FailingStream:
    """A DecodeStream whose step fails from the third token on (as tokenizers' InvalidPrefix)."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.steps = 0

    def step(self, tokenizer: object, token: int) -> str | None:
        self.steps += 1
        if self.steps >= 3:
            raise Exception("InvalidPrefix")  # what the tokenizers package raises
        return self.real.step(tokenizer, token)  # type: ignore[attr-defined,no-any-return]


def test_a_failing_decoder_stream_falls_back_to_decoding_the_whole_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bpe.trained("metaspace").save(str(tmp_path / "tokenizer.json"))
    tokenizer = load_tokenizer(tmp_path, 1000)
    assert isinstance(tokenizer, HFTokenizer)
    stream = tokenizer.text_stream()
    stream._stream = _FailingStream(stream._stream)  # type: ignore[attr-defined]
    ids = tokenizer.encode(TEXTS[1])
    pieces = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == tokenizer.decode(ids)
    assert "tokenizer stream failed (InvalidPrefix)" in caplog.text


def test_without_the_tokenizers_package_a_tokenizer_json_is_refused_naming_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bpe.trained("bytelevel").save(str(tmp_path / "tokenizer.json"))
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if it were not installed
    with pytest.raises(MissingPackage) as caught:
        load_tokenizer(tmp_path, 1000)
    assert str(caught.value) == (
        f"model {tmp_path}: tokenizer.json needs the 'tokenizers' package, which is not installed: "
        + install_command("lm")
    )
    assert caught.value.package == "tokenizers"


def test_a_tokenizers_release_without_decode_stream_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tokenizers

    bpe.trained("bytelevel").save(str(tmp_path / "tokenizer.json"))
    monkeypatch.setattr(tokenizers, "__version__", "0.20.3")
    with pytest.raises(
        MissingPackage, match=r"needs tokenizers>=0\.21\.1 \(its DecodeStream\), found 0\.20\.3"
    ):
        load_tokenizer(tmp_path, 1000)


def test_without_a_tokenizer_json_the_model_reads_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # not needed for bytes
    tokenizer = load_tokenizer(tmp_path, 320, {"bos_token_id": 256, "eos_token_id": 257})
    assert isinstance(tokenizer, ByteTokenizer)
    assert tokenizer.encode("hé") == [104, 0xC3, 0xA9]
    assert "".join(_streamed(tokenizer, [104, 257, 0xC3, 0xA9])) == "hé"  # <eos> (257) is no text


def test_the_tiny_models_byte_vocabulary_reads_through_the_package(tiny_models: dict[str, Path]) -> None:
    tokenizer = load_tokenizer(tiny_models["gqa"], 320, {"bos_token_id": 256, "eos_token_id": [257, 258]})
    assert isinstance(tokenizer, HFTokenizer)
    assert tokenizer.encode("hé 🙂") == list("hé 🙂".encode())
    assert tokenizer.eos_id == 257  # the first of several end tokens
    assert "".join(_streamed(tokenizer, tokenizer.encode("hé 🙂"))) == "hé 🙂"


def test_a_tokenizer_that_does_not_fit_the_model_is_refused(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_models["gqa"], folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    data["model"]["vocab"]["<extra>"] = 4000  # a vocabulary larger than the model's
    (folder / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(TokenizerMismatch, match="ids up to 4000, but the model's vocabulary has 320"):
        LanguageModel(folder)


def test_a_broken_tokenizer_file_is_named(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_models["gqa"], folder)
    (folder / "tokenizer.json").write_text('{"model": {"type": "BPE"')
    with pytest.raises(TokenizerMismatch, match=r"tokenizer\.json"):
        LanguageModel(folder)


def test_stop_strings_end_the_text_before_them(tiny_models: dict[str, Path]) -> None:
    lm = LanguageModel(tiny_models["gqa"])
    full = lm.complete("Hello", SamplingParams(max_new_tokens=30, temperature=0.7, seed=3, ignore_eos=True))
    assert len(full) > 6
    stop = full[3:5]
    cut = lm.complete("Hello", SamplingParams(max_new_tokens=30, temperature=0.7, seed=3, ignore_eos=True,
                                              stop_strings=(stop,)))  # fmt: skip
    assert cut == full[: full.index(stop)]
    assert lm.stats.stop_reason == "stop_string"


def test_every_end_token_id_ends_the_generation(tiny_models: dict[str, Path]) -> None:
    lm = LanguageModel(tiny_models["gqa"])
    prompt = lm.encode("Hello")
    free = list(lm.tokens(prompt, SamplingParams(max_new_tokens=12, ignore_eos=True)))
    lm.tokenizer.eos_ids = (257, free[3])  # type: ignore[misc]  # as if the config listed two
    assert list(lm.tokens(prompt, SamplingParams(max_new_tokens=12))) == free[: free.index(free[3]) + 1]
    assert lm.stats.stop_reason == "stop_token"
    text = lm.complete(prompt, SamplingParams(max_new_tokens=12))  # token ids work as a prompt too
    assert lm.stats.stop_reason == "stop_token"  # not "cancelled"
    assert isinstance(text, str)
