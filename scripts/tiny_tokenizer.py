"""The tokenizer of the tiny test models (:mod:`tiny_lm`): a Hugging Face ``tokenizer.json``
over a byte vocabulary, so that the real tokenizer path can be exercised without a download."""

from __future__ import annotations


def byte_tokenizer_json(specials: dict[str, int]) -> dict[str, object]:
    """A Hugging Face ``tokenizer.json`` for a byte vocabulary: ids 0..255 are the bytes
    (``<0xNN>``, as byte-fallback BPE names them), then ``specials``."""
    vocab = {f"<0x{b:02X}>": b for b in range(256)}
    vocab.update(specials)
    return {
        "version": "1.0",
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "special": True,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
            }
            for t, i in specials.items()
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Split",
            "pattern": {"String": ""},
            "behavior": "Isolated",
            "invert": False,
        },
        "post_processor": None,
        "decoder": {"type": "ByteFallback"},
        "model": {
            "type": "BPE",
            "vocab": vocab,
            "merges": [],
            "byte_fallback": True,
            "unk_token": None,
            "fuse_unk": False,
            "dropout": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
        },
    }
