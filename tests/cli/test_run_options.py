"""``edgepipe run``'s options for the CPU scheduler (``--headroom``, ``--no-governor``) and the
HTTP server (``--port``, ``--host``), and what must never leak through any output."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from tests.cli.test_main import ENDLESS, edgepipe, write

pytestmark = pytest.mark.slow


def test_the_cpu_plan_is_logged_and_the_summary_shows_the_scheduler(tmp_path: Path) -> None:
    # The same run as tests/runner/test_library.py's through edgepipe.run(): the same wiring.
    health = tmp_path / "health.json"
    result = edgepipe("run", "pipelines/demo.py", "--duration", "2.5", "--detect", "none", "--stats",
                      "--headroom", "0.5", "--health-file", str(health))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "CPU budget:" in result.stderr
    assert "x 0.50 =" in result.stderr
    assert "governor: keeps CPU at or under 50%" in result.stderr
    assert "target 50%" in result.stderr  # the line under the summary
    assert "memory plan: + 2.3 MB frame pool (5 x 640x480) (camera)" in result.stderr
    beat = json.loads(health.read_text())
    assert beat["stopped"]
    assert beat["items_out"] > 0
    assert beat["sched"]["governed"]
    assert beat["sched"]["target"] == pytest.approx(0.5)
    assert [r["what"] for r in beat["memory"]["reservations"]] == ["frame pool (5 x 640x480)"]
    ungoverned = edgepipe("run", "pipelines/demo.py", "--duration", "1.5", "--detect", "none", "--stats",
                          "--no-governor")  # fmt: skip
    assert ungoverned.returncode == 0, ungoverned.stderr
    assert "(ungoverned)" in ungoverned.stderr
    assert "governor: keeps" not in ungoverned.stderr


@pytest.mark.parametrize("value", ["1", "-0.1", "nan", "lots"])
def test_a_headroom_out_of_range_is_exit_2(value: str) -> None:
    result = edgepipe("run", "pipelines/demo.py", "--headroom", value)
    assert result.returncode == 2
    assert "--headroom" in result.stderr


def test_port_serves_while_running_and_logs_the_url(tmp_path: Path) -> None:
    path = write(tmp_path, ENDLESS)
    result = edgepipe("run", str(path), "--out", str(tmp_path / "s.txt"), "--duration", "1", "--port", "0")
    assert result.returncode == 0, result.stderr
    assert re.search(r"serving http://127\.0\.0\.1:\d+/metrics, /health, /graph\n", result.stderr), (
        result.stderr
    )


def test_serving_off_loopback_without_a_token_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EDGEPIPE_TOKEN", raising=False)
    path = write(tmp_path, ENDLESS)
    result = edgepipe("run", str(path), "--port", "0", "--host", "0.0.0.0")
    assert result.returncode == 2
    assert "serving on 0.0.0.0 (not loopback) needs a token: set $EDGEPIPE_TOKEN" in result.stderr


def test_a_password_in_a_source_url_never_appears_in_any_output(tmp_path: Path) -> None:
    url = "rtsp://admin:hunter2@127.0.0.1:9/stream"  # nothing listens there: it keeps reconnecting
    results = tmp_path / "r.jsonl"
    run = edgepipe("run", "pipelines/demo.py", "--source", url, "--detect", "none", "--duration", "2.5",
                   "--stats", "--results", str(results))  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "rtsp://admin:***@127.0.0.1:9/stream" in run.stderr
    graph = edgepipe("graph", "pipelines/demo.py", "--source", url, "--format", "json")
    for text in (run.stdout, run.stderr, results.read_text(), graph.stdout, graph.stderr):
        assert "hunter2" not in text
    assert "source_state" in results.read_text()


def test_a_port_in_use_stops_the_run_before_any_camera_is_opened() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = edgepipe(
            "run", "pipelines/demo.py", "--port", str(port), "--detect", "none", "--duration", "2"
        )
    assert result.returncode == 2  # found before anything ran
    assert f"--port {port}: http://127.0.0.1:{port}: " in result.stderr
    assert "choose another --port" in result.stderr
    assert "address already in use" in result.stderr.lower()
    assert "[camera]" not in result.stderr  # the source never started


def test_a_heartbeat_file_that_is_a_fifo_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    from edgepipe.cli.main import main

    fifo = tmp_path / "beat"
    os.mkfifo(fifo)  # each beat is a rename: it would put a regular file in its place
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "pipelines/demo.py", "--health-file", str(fifo), "--duration", "1"])
    assert exit_info.value.code == 2
    assert stat.S_ISFIFO(fifo.stat().st_mode)
