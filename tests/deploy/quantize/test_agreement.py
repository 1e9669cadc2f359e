from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgepipe.deploy.quantize.agreement import agreement, cosine
from edgepipe.deploy.quantize.decoder import quantize_decoder
from tests.deploy.quantize.lm_models import CONFIG, tiny_decoder


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("agreement")
    source = tiny_decoder(root / "tiny")
    quantize_decoder(source, root / "int8", bits=8)
    return {"source": source, "int8": root / "int8", "other": tiny_decoder(root / "other", seed=1)}


def test_int8_follows_its_source(models: dict[str, Path]) -> None:
    figures = agreement(models["source"], models["int8"], ["hello there", "abc"], positions=8, threads=1)
    assert (figures.prompts, figures.positions) == (2, 16)
    assert figures.cosine_min > 0.999
    assert figures.cosine_mean >= figures.cosine_min
    assert figures.top1 >= 0.9


def test_the_same_model_agrees_exactly_and_another_does_not(models: dict[str, Path]) -> None:
    same = agreement(models["source"], models["source"], ["hello"], positions=4, threads=1)
    assert same.top1 == 1.0
    assert same.cosine_min == pytest.approx(1.0, abs=1e-6)
    other = agreement(models["source"], models["other"], ["hello"], positions=16, threads=1)
    assert other.top1 < 0.2
    assert other.cosine_mean < 0.5


def test_a_long_prompt_is_cut_to_fit_the_positions(models: dict[str, Path]) -> None:
    long = "x" * (CONFIG.max_seq_len * 2)  # a byte a token: twice the cache
    figures = agreement(models["source"], models["int8"], [long], positions=200, threads=1)
    assert figures.positions == CONFIG.max_seq_len - 1  # one position left for the prompt


def test_no_prompts_or_positions_is_a_value_error(models: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="no prompts"):
        agreement(models["source"], models["int8"], [], positions=4)
    with pytest.raises(ValueError, match="positions must be 1 or more"):
        agreement(models["source"], models["int8"], ["a"], positions=0)


def test_cosine() -> None:
    assert cosine(np.array([1.0, 0.0], np.float32), np.array([2.0, 0.0], np.float32)) == 1.0
    assert cosine(np.array([1.0, 0.0]), np.array([0.0, 3.0])) == 0.0
    assert cosine(np.array([1.0, 1.0]), np.array([-1.0, -1.0])) == pytest.approx(-1.0)
    assert cosine(np.zeros(3), np.zeros(3)) == 1.0
    assert cosine(np.zeros(3), np.ones(3)) == 0.0
