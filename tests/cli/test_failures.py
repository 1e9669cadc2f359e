"""The one error handler: what a command lets out becomes its exit code and one line on stderr,
the same for every subcommand (``run`` and ``plan`` alike)."""

from __future__ import annotations

import pytest

from edgepipe.cli import failures, plan
from edgepipe.cli.main import main
from edgepipe.core.errors import EdgepipeError, NodeError, PipelineError
from edgepipe.deploy.output import MissingExtra
from edgepipe.runtime.stopsignals import StopRequested

CAMERA = "rtsp://admin:Hunter2@cam/stream"


def _raising(exc: BaseException) -> int:
    raise exc


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (MissingExtra("edgepipe quantize needs onnx: pip install 'edgepipe[deploy]'"), 2),
        (PipelineError(f"cannot open {CAMERA}"), 2),
        (NodeError(f"cannot open {CAMERA}", node_id="camera"), 1),
        (EdgepipeError(f"cannot open {CAMERA}"), 1),
    ],
)
def test_a_known_failure_is_its_code_and_one_masked_line(
    capsys: pytest.CaptureFixture[str], exc: Exception, code: int
) -> None:
    assert failures.handled(lambda: _raising(exc)) == code
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"edgepipe: error: {str(exc).replace('Hunter2', '***')}\n"


def test_anything_else_is_an_internal_error_exit_1_with_its_traceback_under_debug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert failures.handled(lambda: _raising(KeyError(CAMERA))) == 1
    err = capsys.readouterr().err
    assert err == (
        "edgepipe: internal error: KeyError: 'rtsp://admin:***@cam/stream' "
        "(rerun with --debug for the traceback)\n"
    )
    assert failures.handled(lambda: _raising(KeyError(CAMERA)), debug=True) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "Hunter2" not in err


def test_ctrl_c_is_130_and_a_stop_or_a_closed_pipe_go_up_to_entry() -> None:
    assert failures.handled(lambda: _raising(KeyboardInterrupt())) == failures.INTERRUPTED == 130
    with pytest.raises(StopRequested):
        failures.handled(lambda: _raising(StopRequested(15)))
    with pytest.raises(BrokenPipeError):
        failures.handled(lambda: _raising(BrokenPipeError()))


def test_a_deployment_command_fails_as_run_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def bug(*_: object) -> int:
        raise KeyError("no device")

    monkeypatch.setattr(plan, "main", bug)  # the table holds the module: the command is looked up
    assert main(["plan", "--list-devices"]) == 1
    assert capsys.readouterr().err.startswith("edgepipe: internal error: KeyError: 'no device'")
    monkeypatch.setattr(plan, "main", lambda _: _raising(MissingExtra("install it")))
    assert main(["plan", "--list-devices"]) == 2
    assert capsys.readouterr().err == "edgepipe: error: install it\n"
