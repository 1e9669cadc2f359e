"""Exits that tell the truth: a source that cannot be opened ends the run with code 1 and one
error line, never an abort (134) from a model still loading or running on a worker thread
(scripts/check_exits.py repeats each case ten times)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.support.cli_process import REPO, edgepipe, start

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("source", ["missing.mp4", "empty.mp4", "folder"])
def test_face_privacy_with_a_source_it_cannot_open_exits_1(
    tmp_path: Path, source: str, centerface: Path
) -> None:
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "folder").mkdir()
    done = edgepipe("run", REPO / "pipelines" / "face_privacy.py", "--source", tmp_path / source,
                    "--output", tmp_path / "out.mp4", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "terminate called" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("edgepipe: error:")]
    assert len(errors) == 1
    assert source in errors[0]


SLOW_IMPORT = """\
import sys, time
print("importing", file=sys.stderr, flush=True)
time.sleep(30)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_during_start_up_is_exit_0_with_one_line(tmp_path: Path, signum: int) -> None:
    path = tmp_path / "slow.py"
    path.write_text(SLOW_IMPORT)
    with start("run", path, stdout=None, cwd=tmp_path) as proc:
        assert proc.stderr is not None
        assert proc.stderr.readline() == "importing\n"
        proc.send_signal(signum)
        stderr = proc.stderr.read()
        code = proc.wait(timeout=30)
    name = signal.Signals(signum).name
    assert code == 0, stderr
    assert stderr.strip() == f"edgepipe: {name} during start-up: stopped before the pipeline ran"


@pytest.mark.parametrize(
    "argv",
    [["run", "pipelines/demo.py", "--results", "-", "--duration", "30"], ["graph", "pipelines/demo.py"]],
)
def test_a_closed_stdout_where_results_go_is_exit_2_before_anything_runs(argv: list[str]) -> None:
    done = edgepipe(*argv, stdout=None, preexec_fn=lambda: os.close(1))
    assert done.returncode == 2, done.stderr
    assert "standard output is closed" in done.stderr
    assert "[camera]" not in done.stderr  # nothing started
