"""Secrets in URLs never shown by the ``edgepipe`` command: the error line of
a pipeline file whose error quotes its camera's URL, ``--help`` on such a file, an internal
error and its ``--debug`` traceback, ``graph --format json`` and ``--plan`` in-process
(:func:`edgepipe.cli.main`); a run with its log lines, results, heartbeat, ``/graph`` and
``/health`` as a process."""

from __future__ import annotations

import json
import re
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from edgepipe.cli import run as cli_run
from edgepipe.cli.main import main
from tests.support.cli_process import start

CAMERA_URL = "srt://u:Hunter2@127.0.0.1:9000?mode=caller&passphrase=Hunter2&pbkeylen=16"
SHOWN_URL = "srt://u:***@127.0.0.1:9000?mode=caller&passphrase=***&pbkeylen=16"

RAISES = f"""\
    raise ConnectionError("camera {CAMERA_URL} is down; http://cam/mjpeg?user=admin&pass=Hunter2 too")
"""

CAMERA = """\
    from edgepipe import Pipeline
    from edgepipe.media import VideoSource

    def pipeline(source: str = "synthetic://64x48@5") -> Pipeline:
        p = Pipeline("camera")
        p.sink("out", lambda frame: None, inputs=p.source("camera", VideoSource(source)))
        return p
"""


def _write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "p.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_a_pipeline_files_error_shows_the_url_without_its_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, RAISES)
    for command in (["graph", path], ["run", path], ["run", path, "--help"]):
        assert main(command) == 2
        out, err = capsys.readouterr()
        assert "Hunter2" not in out + err, command
        line = err.strip().splitlines()[-1]
        assert line.startswith("edgepipe: error: "), err
        assert (
            f"ConnectionError: camera {SHOWN_URL} is down; http://cam/mjpeg?user=admin&pass=*** too" in line
        )


def test_an_internal_error_and_its_debug_traceback_show_no_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def bug(*_: object) -> int:
        raise KeyError(f"no stream in {CAMERA_URL}")

    monkeypatch.setattr(cli_run, "main", bug)
    assert main(["graph", "any.py"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"edgepipe: internal error: KeyError: 'no stream in {SHOWN_URL}'"), err
    assert main(["graph", "any.py", "--debug"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):"), err
    assert f"KeyError: 'no stream in {SHOWN_URL}'" in err
    assert "Hunter2" not in err


def test_graph_json_and_the_plan_show_the_source_url_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, CAMERA)
    assert main(["graph", path, "--format", "json", "--source", CAMERA_URL]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["nodes"][0]["url"] == SHOWN_URL
    assert "Hunter2" not in out + err
    # --plan opens the camera to learn its frame size: the error it names quotes the URL
    refused = "http://admin:Hunter2@127.0.0.1:1/mjpeg?pass=Hunter2&api_key=Hunter2"
    assert main(["run", path, "--plan", "--source", refused]) == 0
    out, err = capsys.readouterr()
    assert "cannot open http://admin:***@127.0.0.1:1/mjpeg?pass=***&api_key=***: " in out
    assert "Hunter2" not in out + err


@pytest.mark.slow
def test_a_run_shows_its_cameras_secrets_nowhere(tmp_path: Path) -> None:
    """A camera that cannot be reached, served on a port, with results and a
    heartbeat: its log lines, ``source_state`` results, ``/graph``, ``/health`` and the
    heartbeat name the URL, masked."""
    path = _write(tmp_path, CAMERA)
    health = tmp_path / "health.json"
    with start("run", path, "--source", CAMERA_URL, "--duration", "1.5", "--port", "0", "--results", "-",
               "--health-file", health, cwd=tmp_path) as run:  # fmt: skip
        assert run.stderr is not None
        head = []
        for line in run.stderr:  # until the server says where it is
            head.append(line)
            served = re.search(r"serving (http://127\.0\.0\.1:\d+)/", line)
            if served:
                break
        assert served, "".join(head)
        pages = [_get(served[1] + route) for route in ("/graph", "/health")]
        out, err = run.communicate(timeout=30)
    err = "".join(head) + err
    assert run.returncode == 0, err
    shown = [err, out, health.read_text(), *pages]
    for text in shown:
        assert "Hunter2" not in text
    assert json.loads(pages[0])["nodes"][0]["url"] == SHOWN_URL
    assert f"[camera] {SHOWN_URL}: connecting" in err
    assert any(json.loads(line)["data"].get("url") == SHOWN_URL for line in out.splitlines()), out


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except urllib.error.HTTPError as exc:  # /health: 503 while the camera is not live
        return str(exc.read().decode())
