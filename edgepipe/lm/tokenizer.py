"""Text <-> token ids, and streaming ids back into text in whole characters.

- A ``tokenizer.json`` (Hugging Face) is read by the ``tokenizers`` package, the ``lm`` extra
  (:func:`edgepipe.core.install.install_command` words its install); without it, or with a release older than
  :data:`MIN_TOKENIZERS`, a folder with a ``tokenizer.json`` is refused at once
  (:class:`~edgepipe.lm.MissingPackage`): reading it any other way would encode prompts the
  model never saw.
- Without a ``tokenizer.json``: plain bytes, ids 0..255 (:class:`ByteTokenizer`).

``bos_id``, the start token put before a text prompt, is what Hugging Face's ``tokenizer(text)``
puts there: ``add_bos_token`` in ``tokenizer_config.json`` where it says, else what the
tokenizer's post-processor adds (Llama 3's ``<|begin_of_text|>``; nothing for Qwen, whose
``config.json`` names a ``bos_token_id`` all the same). A folder without a
``tokenizer_config.json`` (or without a ``tokenizer.json``) takes ``config.json``'s.

A request's text streams through :meth:`Tokenizer.text_stream`: for a ``tokenizer.json``, the
tokenizer's own decoder (``tokenizers.decoders.DecodeStream``), so spaces, byte-level alphabets,
SentencePiece's ``▁`` and byte-fallback pieces come out as ``Tokenizer.decode`` writes them (a
tokenizer without a decoder gets the library's default, pieces joined by spaces, as ``decode``
does); for bytes, an incremental UTF-8 decoder. Either way a piece is never half a character:
text is held back until its character is whole, and :meth:`TextStream.flush` gives what is left
at the end (a dangling partial character as U+FFFD).
"""

from __future__ import annotations

import codecs
import importlib
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from edgepipe.core.install import install_command, missing
from edgepipe.lm.chat import read_tokenizer_config, token_text
from edgepipe.lm.errors import MissingPackage, TokenizerMismatch

log = logging.getLogger(__name__)

MIN_TOKENIZERS = (0, 21, 1)
"""The first ``tokenizers`` release whose ``DecodeStream`` streams every tokenizer: 0.21.0 added
it to the Python binding, 0.21.1 fixed its panic (#1699) and its ``InvalidPrefix`` error on
Llama 3 (#1716)."""


class TextStream(Protocol):
    """One request's token ids in, its text out; never half a character."""

    def push(self, token: int) -> str:
        """The text that ``token`` completes ('' while it is not out yet)."""
        ...

    def flush(self) -> str:
        """What is left at the end (a dangling partial character becomes U+FFFD)."""
        ...


class Tokenizer(Protocol):
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    eos_ids: tuple[int, ...]
    """Every id that ends a sequence (Llama 3 has three); ``eos_id`` is the first."""

    def encode(self, text: str) -> list[int]: ...

    def token_id(self, text: str) -> int | None:
        """The id of the token written ``text`` (``<|im_end|>``), None if there is none."""
        ...

    def text_stream(self) -> TextStream:
        """A new stream for one request's output."""
        ...


class ByteTokenizer:
    """One token per byte: ids 0..255 are the bytes (for a model without a ``tokenizer.json``)."""

    def __init__(self, vocab_size: int = 256, bos_id: int | None = None, eos_ids: Sequence[int] = ()) -> None:
        self.vocab_size = vocab_size
        self.bos_id = bos_id
        self.eos_ids = tuple(eos_ids)
        self.eos_id = self.eos_ids[0] if self.eos_ids else None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def token_id(self, text: str) -> int | None:
        return None  # bytes have no named tokens

    def text_stream(self) -> TextStream:
        return _ByteStream()


class _ByteStream:
    """Bytes held back until they form whole UTF-8 characters; ids past 255 are no text."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return str(self._decoder.decode(bytes([token]) if 0 <= token < 256 else b""))

    def flush(self) -> str:
        return str(self._decoder.decode(b"", final=True))


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` (Hugging Face) behind the same small interface."""

    def __init__(self, tokenizer: Any, bos_id: int | None, eos_ids: Sequence[int]) -> None:
        self._tok = tokenizer
        self._decoders = importlib.import_module("tokenizers.decoders")
        vocab: dict[str, int] = tokenizer.get_vocab(with_added_tokens=True)
        # The highest id + 1, not the count: added tokens may leave gaps.
        self.vocab_size = max(vocab.values(), default=-1) + 1
        self.bos_id = bos_id
        self.eos_ids = tuple(eos_ids)
        self.eos_id = self.eos_ids[0] if self.eos_ids else None

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def token_id(self, text: str) -> int | None:
        found = self._tok.token_to_id(text)
        return None if found is None else int(found)

    def added_prefix(self) -> list[int]:
        """The ids the tokenizer's post-processor puts before a text (``<|begin_of_text|>``
        for Llama 3, ``<bos>`` for Gemma; none for Qwen's)."""
        plain = self._tok.encode("a", add_special_tokens=False).ids
        full = self._tok.encode("a", add_special_tokens=True).ids
        for start in range(len(full) - len(plain) + 1):
            if full[start : start + len(plain)] == plain:
                return list(full[:start])
        return []

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` as a whole, special tokens left out."""
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def text_stream(self) -> TextStream:
        return _DecoderStream(self)

    def decode_stream(self) -> Any:
        """A new ``tokenizers.decoders.DecodeStream`` (special tokens are no text)."""
        return self._decoders.DecodeStream(skip_special_tokens=True)

    def step(self, stream: Any, token: int) -> str | None:
        """``stream.step`` with this tokenizer: the text ``token`` completes, or None."""
        piece = stream.step(self._tok, token)
        return None if piece is None else str(piece)


HOLD_LIMIT = 8
"""Tokens a stream holds back at most. A character is at most 4 bytes, so a real model's text
never waits this long; a model writing invalid UTF-8 would otherwise hold its text to the end."""


class _DecoderStream:
    """The tokenizer's ``DecodeStream``, one per request, and the tokens it holds back.

    ``DecodeStream.step`` gives None while the text so far ends in a partial character (or the
    token is no text: a special or unknown id) and has no end of its own: what it holds is
    decoded at :meth:`flush`, or once it holds more than :data:`HOLD_LIMIT` tokens with some
    text, or when a step fails (``tokenizers`` raises plain ``Exception``); the stream then
    starts afresh (the next token is decoded without the ones before it: a SentencePiece
    tokenizer may drop its leading space, which only text that was no UTF-8 comes to).
    """

    def __init__(self, tokenizer: HFTokenizer) -> None:
        self._tokenizer = tokenizer
        self._stream = tokenizer.decode_stream()
        self._held: list[int] = []
        self._failed = False

    def push(self, token: int) -> str:
        self._held.append(token)
        try:
            piece = self._tokenizer.step(self._stream, token)
        except Exception as exc:  # tokenizers raises bare Exceptions (InvalidPrefix ...)
            if not self._failed:
                log.warning("tokenizer stream failed (%s); decoding what it held and starting afresh", exc)
            self._failed = True
            return self._release()
        if piece is not None:
            self._held.clear()
            return piece
        if len(self._held) <= HOLD_LIMIT:
            return ""
        if not self._tokenizer.decode(self._held):  # special or unknown ids, no text: the stream
            self._held.clear()  # keeps its place (and the context the next token is decoded in)
            return ""
        return self._release()

    def flush(self) -> str:
        return self._release()

    def _release(self) -> str:
        """The held tokens' text, as the decoder writes it (U+FFFD for a partial character);
        the stream starts afresh after them."""
        text = self._tokenizer.decode(self._held) if self._held else ""
        self._held.clear()
        self._stream = self._tokenizer.decode_stream()
        return text


def load_tokenizer(folder: Path, model_vocab: int, config: dict[str, Any] | None = None) -> Tokenizer:
    """The tokenizer for the model in ``folder``. Raises :class:`MissingPackage` for a
    ``tokenizer.json`` without the ``tokenizers`` package, :class:`TokenizerMismatch` if the
    file cannot be read or its ids do not fit the model's vocabulary."""
    config = config or {}
    bos = _token_ids(config.get("bos_token_id"))
    eos = _token_ids(config.get("eos_token_id"))
    bos_id = bos[0] if bos else None
    path = folder / "tokenizer.json"
    tokenizer = _from_json(path, bos_id, eos) if path.is_file() else ByteTokenizer(256, bos_id, eos)
    if isinstance(tokenizer, HFTokenizer):
        tokenizer.bos_id = _start_token(tokenizer, read_tokenizer_config(folder), bos_id)
    highest = max([tokenizer.vocab_size - 1, *bos, *eos])
    if highest >= model_vocab:
        raise TokenizerMismatch(
            f"the tokenizer ({path if path.is_file() else 'bytes'}) has ids up to {highest}, but the model's "
            f"vocabulary has {model_vocab}: they were not made for each other",
            model=str(folder),
        )
    return tokenizer


def tokenizers_package(path: Path) -> Any:
    """The ``tokenizers`` module, to read ``path`` (a ``tokenizer.json``). Raises
    :class:`MissingPackage` naming the command when it is not installed or too old."""
    floor = ".".join(map(str, MIN_TOKENIZERS))
    try:
        module = importlib.import_module("tokenizers")
    except ImportError:
        raise MissingPackage(
            missing("tokenizers", "lm", path.name),
            model=str(path.parent), package="tokenizers",
        ) from None  # fmt: skip
    found = str(getattr(module, "__version__", "0"))
    if _version(found) < MIN_TOKENIZERS:
        raise MissingPackage(
            f"{path.name} needs tokenizers>={floor} (its DecodeStream), found {found}: "
            + install_command("lm", upgrade=True),
            model=str(path.parent), package="tokenizers",
        )  # fmt: skip
    return module


def _version(text: str) -> tuple[int, ...]:
    """``"0.21.1rc0"`` -> ``(0, 21, 1)``."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _token_ids(value: Any) -> list[int]:
    """A config's token id: an int, a list of them (several end tokens), or absent."""
    values = value if isinstance(value, list) else [value]
    return [int(v) for v in values if isinstance(v, int)]


def _start_token(tokenizer: HFTokenizer, settings: dict[str, Any], config_bos: int | None) -> int | None:
    """The id put before a prompt given as text, as Hugging Face's ``tokenizer(text)`` puts
    it: ``add_bos_token`` in ``tokenizer_config.json`` where it says; else what the tokenizer's
    post-processor adds (nothing for Qwen, whose config.json names a ``bos_token_id`` all the
    same). Without a ``tokenizer_config.json``, config.json's ``bos_token_id``, as before."""
    lead = tokenizer.added_prefix()
    add = settings.get("add_bos_token")
    if isinstance(add, bool):
        if not add:
            return None
        named = token_text(settings.get("bos_token"))
        named_id = tokenizer.token_id(named) if named else None
        return named_id if named_id is not None else (lead[0] if lead else config_bos)
    if lead:
        return lead[0]
    return None if settings else config_bos


def _from_json(path: Path, bos: int | None, eos: Sequence[int]) -> Tokenizer:
    hf = tokenizers_package(path)
    try:
        loaded = hf.Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers package raises plain Exceptions for bad files
        raise TokenizerMismatch(f"{path} cannot be loaded: {exc}", model=str(path.parent)) from exc
    return HFTokenizer(loaded, bos, eos)
