from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe.infer import Session, SessionConfig, loading
from tests.support.onnx_builders import add_model


def test_a_profiled_model_named_by_its_path_writes_its_profile_in_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    monkeypatch.setattr(loading, "profile_prefix", str(folder / "ort_"))
    monkeypatch.setattr(loading, "profiled", [])
    # as the LM runner names its session: the path it was given
    Session(add_model(tmp_path / "add.onnx"), SessionConfig(cache_optimized=False, threads=1),
            name="./lmdir/qwen-tiny")  # fmt: skip
    [(name, _, session)] = loading.profiled
    written = Path(session.end_profiling())
    assert name == "./lmdir/qwen-tiny"
    assert written.parent == folder
    assert written.is_file()
    assert written.name.startswith("ort__lmdir_qwen-tiny")
