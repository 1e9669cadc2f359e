"""The deployment commands as one family: each is on the command line with the shared options,
and a reader closing the pipe early is not an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from edgepipe import cli_deploy
from edgepipe.cli import _parser


@pytest.mark.parametrize("command", cli_deploy.COMMANDS)
def test_each_command_has_its_module_and_the_shared_format_option(command: str) -> None:
    sub = next(a for a in _parser()._actions if a.dest == "command")
    parser = sub.choices[command]  # type: ignore[index]
    options = {s for a in parser._actions for s in a.option_strings}
    assert "--format" in options
    assert "--help" in options


def test_a_reader_closing_the_pipe_is_not_an_internal_error(tmp_path: Path) -> None:
    for i in range(400):  # enough JSON to outgrow the pipe's buffer
        (tmp_path / f"f{i:03}.txt").write_text("plain text\n" * 3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgepipe", "doctor", str(tmp_path), "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert "internal error" not in err
    assert "Traceback" not in err
