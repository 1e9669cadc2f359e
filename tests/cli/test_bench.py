"""``edgepipe bench lm``: options that fit the model's cache buffer, or one line naming what fits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgepipe.cli.main import main
from edgepipe.lm.bench import cache_buffer, longest_context, positions_needed
from scripts import tiny_lm


@pytest.fixture(scope="module")
def tiny_lm_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documented ``./tiny-lm`` (``scripts/make_tiny_lm.py tiny-lm``): a 512-position buffer."""
    return tiny_lm.write(tmp_path_factory.mktemp("bench") / "tiny-lm", tiny_lm.TinyConfig(), "gqa").parent


def _bench(capsys: pytest.CaptureFixture[str], folder: Path, *options: str) -> tuple[int, str, str]:
    code = main(["bench", "lm", str(folder), *options])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cache_buffer_is_read_from_the_file(tiny_lm_folder: Path, tmp_path: Path) -> None:
    assert cache_buffer(tiny_lm_folder) == 512
    concat = tiny_lm.write(tmp_path / "concat", tiny_lm.TinyConfig(), "concat").parent
    assert cache_buffer(concat) is None  # the runner makes its buffers as long as asked


def test_the_longest_context_is_the_last_that_fits() -> None:
    assert longest_context(512, 32) == 479  # 479 + 32 + 1 = 512
    assert positions_needed([479], 32) == 512
    two = longest_context(512, 32, slots=2)
    assert positions_needed([two], 32, slots=2) <= 512 < positions_needed([two + 1], 32, slots=2)
    assert longest_context(10, 20) == 0


@pytest.mark.slow
def test_the_defaults_fit_the_models_cache_buffer(
    tiny_lm_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _bench(capsys, tiny_lm_folder, "--tokens", "4", "--format", "json")
    assert code == 0, err
    figures = json.loads(out)
    assert [row["context"] for row in figures["contexts"]] == [128, 507]  # 512 cut to 507 + 4 + 1
    assert (
        "bench lm: prompts of 128, 507 tokens, cut to fit the 512 positions of the model's cache buffer"
        in err
    )


@pytest.mark.parametrize(
    ("options", "named", "fits"),
    [
        (("--max-seq-len", "600"), "--max-seq-len 600", "give --max-seq-len 512 or less"),
        (("--contexts", "600"), "--contexts 600", "give --contexts of at most 479"),
        (("--contexts", "128,500", "--tokens", "20"), "--contexts 128,500", "give --contexts of at most 491"),
        (("--tokens", "600"), "--tokens 600", "give --tokens 383 or less"),  # the 128-token prompt kept
        (
            ("--max-seq-len", "100", "--contexts", "128"),
            "--max-seq-len 100 holds 100",
            "give --contexts of at most 67",
        ),
    ],
)
def test_options_that_cannot_fit_are_refused_naming_what_fits(
    tiny_lm_folder: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...], named: str, fits: str
) -> None:
    code, out, err = _bench(capsys, tiny_lm_folder, *options)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert named in err
    assert fits in err


def test_every_option_has_a_help_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["bench", "lm", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--format {text,json} text: a table for people" in text
    assert "--max-seq-len N positions of the KV cache" in text
