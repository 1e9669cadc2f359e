from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from edgepipe.core.install import install_command
from edgepipe.lm import LanguageModel, LMWorker, MissingPackage, ModelFolder, SamplingParams
from tests.lm import bpe

HINT = "docs/language-models.md shows how to export one"


def test_a_model_folder_with_its_files_passes(tiny_models: dict[str, Path]) -> None:
    ModelFolder().check(tiny_models["gqa"])
    ModelFolder().check(str(tiny_models["gqa"]))


def test_no_folder_says_what_is_needed_and_where_to_get_it() -> None:
    with pytest.raises(
        ValueError,
        match=rf"^a folder with an ONNX language model: model\.onnx and tokenizer\.json \({HINT}\)$",
    ):
        ModelFolder().check(None)


def test_a_folder_missing_a_file_names_it(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_models["gqa"], folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match=rf"\(it has no tokenizer\.json; {HINT}\)$"):
        ModelFolder().check(folder)
    with pytest.raises(ValueError, match=rf"\(it has no model\.onnx and no tokenizer\.json; {HINT}\)$"):
        ModelFolder().check(tmp_path)
    with pytest.raises(ValueError, match=r"there is no folder there"):
        ModelFolder().check(tmp_path / "absent")


def test_a_tokenizer_json_without_the_tokenizers_package_names_the_command(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    expected = (
        "a model whose files can be read (tokenizer.json needs the 'tokenizers' package, which is not "
        f"installed: {install_command('lm')})"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        ModelFolder().check(tiny_models["gqa"])
    # A worker is refused when it is made, not when its model loads in a running pipeline
    with pytest.raises(MissingPackage, match=re.escape(install_command("lm"))):
        LMWorker(tiny_models["gqa"])
    with pytest.raises(MissingPackage):
        LMWorker(tiny_models["gqa"] / "model.onnx")  # the folder of a file given by path


def test_a_worker_of_a_model_without_tokenizer_json_needs_no_package(
    tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_models["gqa"], folder)
    (folder / "tokenizer.json").unlink()
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    LMWorker(folder).close()  # bytes: ids 0..255


def test_an_optimum_export_folder_is_read_as_it_lands(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """What `optimum-cli export onnx --task text-generation-with-past` writes (docs/language-models.md,
    "A real model"): model.onnx with its weights in model.onnx_data, config.json, generation_config.json
    with several end tokens, tokenizer.json, and files edgepipe does not read."""
    import onnx

    tok = bpe.trained("bytelevel")
    folder = bpe.model_with(tok, tiny_models["concat"], tmp_path / "qwen-like")
    graph = onnx.load(str(folder / "model.onnx"))
    onnx.save(graph, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx_data", size_threshold=100)  # fmt: skip  # as optimum saves it
    assert (folder / "model.onnx_data").stat().st_size > (folder / "model.onnx").stat().st_size
    end, other = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [end, other], "do_sample": True})
    )
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).write_text("{}")
    ModelFolder().check(folder)
    lm = LanguageModel(folder)
    assert lm.tokenizer.eos_ids == (end, other)
    text = lm.complete("the camera sees", SamplingParams(max_new_tokens=8))
    assert isinstance(text, str)
    assert lm.stats.new_tokens >= 1
