"""Real ``tokenizers`` tokenizers, trained in the test on a few sentences (no download).

``bytelevel`` is GPT-2 / Qwen style (byte-level BPE, ``ByteLevel`` decoder), ``metaspace`` is
Llama 2 / SentencePiece style (``▁`` for spaces, byte-fallback pieces, their decoder chain),
``chars`` is SentencePiece without byte fallback: every token is whole characters, so any ids
an untrained model picks decode to valid text.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

SENTENCES = [
    "hello world, héllo wörld, café ☕ 日本 日本語 emoji 😀 the quick brown fox",
    "a person walks past the door; the camera sees two faces near the gate",
    "nothing moved in the last ten seconds and the street is empty",
] * 30

SPECIALS = ("<|endoftext|>", "<|im_end|>")
"""Added after training, so they take the ids after the vocabulary (as in Qwen's)."""


def trained(style: str, vocab_size: int = 300) -> Any:
    """A ``tokenizers.Tokenizer`` of ``style`` (``bytelevel``, ``metaspace`` or ``chars``) with
    :data:`SPECIALS` added after its ``vocab_size`` tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    if style == "metaspace":
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        pieces = ["<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
        tok.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=pieces))
        # The trainer makes the byte pieces special tokens; in a Llama vocabulary they are plain
        # ones (text that decodes), so: out of the added tokens, kept in the model's vocabulary.
        data = json.loads(tok.to_str())
        data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] == "<unk>"]
        tok = Tokenizer.from_str(json.dumps(data))
    elif style == "chars":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        tok.train_from_iterator(
            SENTENCES, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>"])
        )
    elif style == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        tok.train_from_iterator(
            SENTENCES, trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet)
        )
    else:
        raise ValueError(style)
    tok.add_special_tokens([AddedToken(s, special=True) for s in SPECIALS])
    return tok


def model_with(tokenizer: Any, model: Path, folder: Path) -> Path:
    """A copy of the tiny model in ``model`` with ``tokenizer`` as its tokenizer.json, and
    config.json's end token set to the tokenizer's ``<|im_end|>``."""
    shutil.copytree(model, folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "config.json").read_text())
    config["bos_token_id"] = None  # as Qwen: no start token
    config["eos_token_id"] = [tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")]
    (folder / "config.json").write_text(json.dumps(config))
    return folder
