from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from edgepipe.lm import LanguageModel, SamplingParams, TokenizerMismatch
from edgepipe.lm.tokenizer import ByteTokenizer, HFTokenizer, TextStream, load_tokenizer


def test_a_stream_never_splits_a_character() -> None:
    tokenizer = ByteTokenizer(list(range(256)), 256)
    stream = TextStream(tokenizer)
    text = "naïve café 🙂 ok"
    pieces = [stream.push(b) for b in text.encode("utf-8")]
    assert "".join(pieces) + stream.flush() == text
    for piece in pieces:
        piece.encode("utf-8")  # whole characters only: a lone surrogate or half a char would fail here
    assert pieces[text.encode().index("🙂".encode()) : text.encode().index("🙂".encode()) + 3] == ["", "", ""]


def test_byte_fallback_vocabularies_work_without_the_tokenizers_package(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if it were not installed
    tokenizer = load_tokenizer(tiny_models["gqa"], 320, {"bos_token_id": 256, "eos_token_id": 257})
    assert isinstance(tokenizer, ByteTokenizer)
    assert tokenizer.encode("hé") == [104, 0xC3, 0xA9]
    assert tokenizer.token_bytes(257) == b""  # <eos> is special: no text


def test_with_the_tokenizers_package_the_same_file_gives_the_same_ids(tiny_models: dict[str, Path]) -> None:
    tokenizer = load_tokenizer(tiny_models["gqa"], 320, {"bos_token_id": 256, "eos_token_id": [257, 258]})
    assert isinstance(tokenizer, HFTokenizer)
    assert tokenizer.encode("hé 🙂") == list("hé 🙂".encode())
    assert tokenizer.eos_id == 257  # the first of several end tokens
    stream = TextStream(tokenizer)
    assert "".join(stream.push(t) for t in tokenizer.encode("hé 🙂")) + stream.flush() == "hé 🙂"


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


TEXT = ["hello world, héllo wörld 日本語 emoji 😀 the quick brown fox"] * 50


def _trained(style: str):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if style == "metaspace":  # Llama / SentencePiece style, with byte fallback
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        )
        specials = ["<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
        tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=320, special_tokens=specials))
    else:  # GPT-2 / Qwen style byte-level BPE
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=320, initial_alphabet=alphabet))
    return tok


@pytest.mark.parametrize("style", ["metaspace", "bytelevel"])
def test_real_tokenizers_stream_what_they_decode(style: str) -> None:
    tok = _trained(style)
    wrapped = HFTokenizer(tok, None, ())
    text = "hello world, 日本 😀 fox"
    ids = wrapped.encode(text)
    stream = TextStream(wrapped)
    streamed = "".join(stream.push(i) for i in ids) + stream.flush()
    assert streamed.strip() == tok.decode(ids).strip() == text


def test_without_the_package_only_a_pure_byte_vocabulary_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _trained("metaspace").save(str(tmp_path / "tokenizer.json"))
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(TokenizerMismatch, match="install the 'tokenizers' package"):
        load_tokenizer(tmp_path, 1000)


def test_every_end_token_id_ends_the_generation(tiny_models: dict[str, Path]) -> None:
    from edgepipe.lm import LanguageModel, SamplingParams

    lm = LanguageModel(tiny_models["gqa"])
    prompt = lm.encode("Hello")
    free = list(lm.tokens(prompt, SamplingParams(max_new_tokens=12, ignore_eos=True)))
    lm.tokenizer.eos_ids = (257, free[3])  # type: ignore[misc]  # as if the config listed two
    assert list(lm.tokens(prompt, SamplingParams(max_new_tokens=12))) == free[: free.index(free[3]) + 1]
    assert lm.stats.stop_reason == "stop_token"
    text = lm.complete(prompt, SamplingParams(max_new_tokens=12))  # token ids work as a prompt too
    assert lm.stats.stop_reason == "stop_token"  # not "cancelled"
    assert isinstance(text, str)
