from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe.lm import LanguageModel, SamplingParams
from edgepipe.lm import tokenizer as tokenizer_module
from edgepipe.lm.tokenizer import HFTokenizer
from tests.lm import bpe

GREEDY = SamplingParams(max_new_tokens=40, ignore_eos=True)


@pytest.mark.parametrize("layout", ["gqa", "concat"])
def test_the_text_is_what_the_tokenizer_decodes_of_the_generated_ids(
    tiny_models: dict[str, Path], tmp_path: Path, layout: str
) -> None:
    folder = bpe.model_with(bpe.trained("chars"), tiny_models[layout], tmp_path / "m")
    lm = LanguageModel(folder)
    assert isinstance(lm.tokenizer, HFTokenizer)
    prompt = lm.encode("the camera sees")
    ids = list(lm.tokens(prompt, GREEDY))
    pieces = list(lm.pieces(prompt, GREEDY))
    text = lm.tokenizer.decode(ids)
    assert len(text.split()) > 3  # words, from tokens that are whole characters
    # SentencePiece drops the first token's leading space: as decode() does, not as its pieces spell it
    assert "".join(pieces) == text
    assert not text.startswith(" ")
    assert len([p for p in pieces if p]) > 10  # streamed token by token, not at the end


def test_the_end_tokens_of_a_real_tokenizer_end_the_text(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    tok = bpe.trained("chars")
    folder = bpe.model_with(tok, tiny_models["gqa"], tmp_path / "m")
    lm = LanguageModel(folder)
    assert lm.tokenizer.eos_ids == (tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>"))
    prompt = lm.encode("hello")
    free = list(lm.tokens(prompt, GREEDY))
    lm.tokenizer.eos_ids = (free[5],)  # type: ignore[misc]  # as if the model had written its end token there
    text = lm.complete(prompt, SamplingParams(max_new_tokens=40))
    assert lm.stats.stop_reason == "stop_token"
    assert text == lm.tokenizer.decode(free[: free.index(free[5])])  # the end token is no text


def test_a_model_writing_invalid_utf8_still_streams(tiny_models: dict[str, Path]) -> None:
    # The tiny model's own tokenizer is bytes: untrained, it writes byte runs that are no UTF-8
    lm = LanguageModel(tiny_models["gqa"])
    params = SamplingParams(max_new_tokens=40, temperature=0.7, seed=3, ignore_eos=True)
    pieces = [p for p in lm.pieces("Hello", params) if p]
    assert len(pieces) > 2  # held at most HOLD_LIMIT tokens at a time, not to the end
    for piece in pieces:
        piece.encode("utf-8")  # whole characters (U+FFFD for bytes that make none)


def test_a_stop_string_in_the_text_held_to_the_end_cuts_it(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = LanguageModel(tiny_models["gqa"])
    params = SamplingParams(max_new_tokens=30, temperature=0.7, seed=3, ignore_eos=True)
    monkeypatch.setattr(tokenizer_module, "HOLD_LIMIT", 10_000)  # nothing comes out before the end
    full = lm.complete("Hello", params)
    assert len(full) > 6
    stop = full[3:5]
    cut = lm.complete("Hello", SamplingParams(max_new_tokens=30, temperature=0.7, seed=3, ignore_eos=True,
                                              stop_strings=(stop,)))  # fmt: skip
    assert cut == full[: full.index(stop)]
    assert lm.stats.stop_reason == "stop_string"


def test_a_request_begins_when_asked_for_so_a_cancel_before_its_first_step_ends_it(
    tiny_models: dict[str, Path],
) -> None:
    lm = LanguageModel(tiny_models["gqa"])
    ticket = lm.runner.session.ticket
    lm.cancel()  # a cancel from before the request does not touch it
    assert len(list(lm.tokens([65, 66], GREEDY))) == 40
    runs = ticket.calls
    for steps in (lm.tokens([65, 66], GREEDY), lm.pieces([65, 66], GREEDY)):
        lm.cancel()  # after the call, before the first next(): the request is under way
        assert list(steps) == []
        assert lm.stats.stop_reason == "cancelled"
        assert lm.stats.new_tokens == 0
    assert ticket.calls == runs  # not even the prompt ran
    assert ticket.cancel is not None
