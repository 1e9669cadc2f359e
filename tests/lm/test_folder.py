from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from edgepipe.lm import LMWorker, MissingPackage, ModelFolder

HINT = 'README "Language models" shows how to export one'


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
        "installed: pip install 'edgepipe[lm]')"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        ModelFolder().check(tiny_models["gqa"])
    # A worker is refused when it is made, not when its model loads in a running pipeline
    with pytest.raises(MissingPackage, match=r"pip install 'edgepipe\[lm\]'"):
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
