"""Text <-> token ids, and streaming ids back into text without splitting a character.

- A ``tokenizer.json`` with the Hugging Face ``tokenizers`` package installed: the real thing.
- Without the package, a ``tokenizer.json`` whose vocabulary has byte tokens (``<0x00>`` ..
  ``<0xFF>``, as byte-fallback BPE vocabularies do) is used byte by byte: every text encodes
  (less compactly than with merges), every output decodes.
- Without a ``tokenizer.json``: plain bytes, ids 0..255.

:class:`TextStream` turns ids into text pieces as they come: bytes are held back until they
form whole UTF-8 characters, so no piece ever ends in half a character.
"""

from __future__ import annotations

import codecs
import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from edgepipe.lm.errors import TokenizerMismatch


class Tokenizer(Protocol):
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    eos_ids: tuple[int, ...]
    """Every id that ends a sequence (Llama 3 has three); ``eos_id`` is the first."""

    def encode(self, text: str) -> list[int]: ...

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for (b"" for special tokens)."""
        ...


class ByteTokenizer:
    """One token per byte, through a table (ids of ``<0xNN>`` tokens, or the bytes themselves)."""

    def __init__(self, byte_ids: list[int], vocab_size: int, bos_id: int | None = None,
                 eos_ids: Sequence[int] = ()) -> None:  # fmt: skip
        if len(byte_ids) != 256:
            raise ValueError("a byte tokenizer needs an id for each of the 256 bytes")
        self._to_id = byte_ids
        self._to_byte = {token: bytes([b]) for b, token in enumerate(byte_ids)}
        self.vocab_size = vocab_size
        self.bos_id = bos_id
        self.eos_ids = tuple(eos_ids)
        self.eos_id = self.eos_ids[0] if self.eos_ids else None

    def encode(self, text: str) -> list[int]:
        table = self._to_id
        return [table[b] for b in text.encode("utf-8")]

    def token_bytes(self, token: int) -> bytes:
        return self._to_byte.get(token, b"")


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` (Hugging Face) behind the same small interface.

    Each token's bytes are worked out once, from how the tokenizer spells its pieces: GPT-2
    style byte-level alphabets are mapped back to bytes, SentencePiece's ``▁`` becomes a space,
    ``<0xNN>`` byte-fallback pieces are that byte, special tokens are no text. Decoding one
    token at a time through the library would lose spaces and split characters.
    """

    def __init__(self, tokenizer: Any, bos_id: int | None, eos_ids: Sequence[int]) -> None:
        self._tok = tokenizer
        vocab: dict[str, int] = tokenizer.get_vocab(with_added_tokens=True)
        # The highest id + 1, not the count: added tokens may leave gaps.
        self.vocab_size = max(vocab.values(), default=-1) + 1
        self.bos_id = bos_id
        self.eos_ids = tuple(eos_ids)
        self.eos_id = self.eos_ids[0] if self.eos_ids else None
        self._bytes = _token_bytes_table(tokenizer, vocab, self.vocab_size)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def token_bytes(self, token: int) -> bytes:
        return self._bytes[token] if 0 <= token < len(self._bytes) else b""


def _is_byte_piece(piece: str) -> bool:
    return len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-ins for bytes (a character per byte) -> the byte."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(0x100 + extra)] = b
            extra += 1
    return table


def _token_bytes_table(tokenizer: Any, vocab: dict[str, int], size: int) -> list[bytes]:
    spec = json.loads(tokenizer.to_str())
    decoder = json.dumps(spec.get("decoder") or {})
    specials = {t["content"] for t in spec.get("added_tokens", []) if t.get("special")}
    byte_level = '"ByteLevel"' in decoder
    metaspace = "\u2581" in decoder or "▁" in decoder or '"Metaspace"' in decoder
    alphabet = _byte_level_alphabet() if byte_level else {}
    table = [b""] * size
    for piece, token in vocab.items():
        if piece in specials:
            continue
        if _is_byte_piece(piece):
            table[token] = bytes([int(piece[3:5], 16)])
        elif byte_level and all(ch in alphabet for ch in piece):
            table[token] = bytes(alphabet[ch] for ch in piece)
        elif metaspace:
            table[token] = piece.replace("\u2581", " ").encode("utf-8")
        else:
            table[token] = tokenizer.decode([token], skip_special_tokens=True).encode("utf-8")
    return table


def load_tokenizer(folder: Path, model_vocab: int, config: dict[str, Any] | None = None) -> Tokenizer:
    """The tokenizer for the model in ``folder``; :class:`TokenizerMismatch` if its ids do not
    fit the model's vocabulary."""
    config = config or {}
    bos = _token_ids(config.get("bos_token_id"))
    eos = _token_ids(config.get("eos_token_id"))
    bos_id = bos[0] if bos else None
    path = folder / "tokenizer.json"
    tokenizer: Tokenizer
    if path.is_file():
        tokenizer = _from_json(path, bos_id, eos)
    else:
        tokenizer = ByteTokenizer(list(range(256)), 256, bos_id, eos)
    highest = max([tokenizer.vocab_size - 1, *bos, *eos])
    if highest >= model_vocab:
        raise TokenizerMismatch(
            f"the tokenizer ({path if path.is_file() else 'bytes'}) has ids up to {highest}, but the model's "
            f"vocabulary has {model_vocab}: they were not made for each other",
            model=str(folder),
        )
    return tokenizer


def _token_ids(value: Any) -> list[int]:
    """A config's token id: an int, a list of them (several end tokens), or absent."""
    values = value if isinstance(value, list) else [value]
    return [int(v) for v in values if isinstance(v, int)]


def _from_json(path: Path, bos: int | None, eos: Sequence[int]) -> Tokenizer:
    try:
        hf: Any = importlib.import_module("tokenizers")  # optional: the real tokenizer when installed
    except ImportError:
        hf = None
    if hf is not None:
        try:
            loaded = hf.Tokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers package raises plain Exceptions for bad files
            raise TokenizerMismatch(f"{path} cannot be loaded: {exc}", model=str(path.parent)) from exc
        return HFTokenizer(loaded, bos, eos)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        vocab: dict[str, int] = data["model"]["vocab"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TokenizerMismatch(
            f"{path} is not a tokenizer.json this can read: {exc}", model=str(path.parent)
        ) from exc
    byte_ids = [vocab.get(f"<0x{b:02X}>") for b in range(256)]
    added = {str(t.get("content")) for t in data.get("added_tokens", [])}
    others = [piece for piece in vocab if piece not in added and not _is_byte_piece(piece)]
    if any(i is None for i in byte_ids) or others:
        # Anything beyond bytes needs the real tokenizer: reading it byte by byte would encode
        # prompts the model never saw and decode its other tokens to nothing.
        raise TokenizerMismatch(
            f"{path} is more than a byte vocabulary ({len(others)} other tokens); install the "
            "'tokenizers' package (pip install tokenizers) to use it",
            model=str(path.parent),
        )
    size = max(vocab.values()) + 1
    for added in data.get("added_tokens", []):
        size = max(size, int(added.get("id", 0)) + 1)
    return ByteTokenizer([int(i) for i in byte_ids if i is not None], size, bos, eos)


class TextStream:
    """Token ids in, text pieces out, never splitting a UTF-8 character."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        """The text that ``token`` completes ('' while a character is still partial)."""
        return str(self._decoder.decode(self._tokenizer.token_bytes(token)))

    def flush(self) -> str:
        """What is left at the end (a dangling partial character becomes U+FFFD)."""
        return str(self._decoder.decode(b"", final=True))
