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
