"""The deployment commands as one family: each is on the command line with the shared options,
a reader closing the pipe early is not an error, their input and output files are checked for
what they are (and outputs written whole), and their numbers are refused in one line."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from edgepipe.cli.main import COMMANDS, _parser, main
from tests.support.cli_process import start
from tests.support.disks import full_device, small_tmpfs
from tests.support.onnx_builders import add_model

DEPLOYMENT = [name for name, command in COMMANDS.items() if command.deployment]


def test_the_deployment_commands_are_the_six() -> None:
    assert DEPLOYMENT == ["plan", "check-ops", "quantize", "compare", "doctor", "trace"]


@pytest.mark.parametrize("command", DEPLOYMENT)
def test_each_command_has_its_module_and_the_shared_format_option(command: str) -> None:
    sub = next(a for a in _parser()._actions if a.dest == "command")
    parser = sub.choices[command]  # type: ignore[index]
    options = {s for a in parser._actions for s in a.option_strings}
    assert "--format" in options
    assert "--help" in options


@pytest.mark.slow
def test_a_reader_closing_the_pipe_is_not_an_internal_error(tmp_path: Path) -> None:
    for i in range(400):  # enough JSON to outgrow the pipe's buffer
        (tmp_path / f"f{i:03}.txt").write_text("plain text\n" * 3)
    proc = start("doctor", tmp_path, "--format", "json", text=False)
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert "internal error" not in err
    assert "Traceback" not in err


REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "pipelines" / "hello.py"


def edgepipe(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, list[str]]:
    """The command run in this process: (exit code, stdout, stderr's lines)."""
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:  # argparse's refusals
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def special(tmp_path: Path, kind: str) -> Path:
    if kind == "fifo":
        os.mkfifo(tmp_path / "node.py")
        return tmp_path / "node.py"
    return full_device(tmp_path, "node.py")


NAMED = {"fifo": "a FIFO (named pipe)", "device": "a character device"}


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("command", ["check-ops", "plan", "trace", "quantize --calib", "compare --input",
                                     "trace --params"])  # fmt: skip
def test_a_fifo_or_device_given_as_an_input_is_named_never_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, kind: str
) -> None:
    node = special(tmp_path, kind)
    model = add_model(tmp_path / "add.onnx", shape=(1, 3, "H", "W"))
    args = {"check-ops": ["check-ops", node, "--target", "cpu"], "plan": ["plan", node],
            "trace": ["trace", node, "--duration", "1"], "quantize --calib": ["quantize", model, "--calib", node],
            "compare --input": ["compare", model, model, "--input", node],
            "trace --params": ["trace", HELLO, "--duration", "1", "--params", node]}[command]  # fmt: skip
    code, _, err = edgepipe(capsys, *args)
    assert code == 2
    [line] = err
    assert line.startswith("edgepipe: error: ")
    assert f"{node}: is {NAMED[kind]}, not a file" in line


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_output_that_is_not_a_regular_file_is_never_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, force: bool
) -> None:
    node = special(tmp_path, kind)
    model = add_model(tmp_path / "add.onnx", shape=(1, 3, "H", "W"))
    for args in (
        ["quantize", model, "--calib", model, "-o", node],
        ["trace", HELLO, "--duration", "1", "-o", node],
    ):
        code, _, err = edgepipe(capsys, *args, *(["--force"] if force else []))
        assert code == 2
        [line] = err
        assert f"-o {node}: is {NAMED[kind]}, not a regular file" in line
        assert "--force" not in line  # not steered toward replacing a device
    mode = os.lstat(node).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["add.onnx", "node.py"]


def test_a_trace_on_a_full_disk_names_it_and_leaves_no_partial_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with small_tmpfs(tmp_path, "1m", fill=True) as disk:
        out = disk / "trace.json"
        code, stdout, err = edgepipe(
            capsys, "trace", HELLO, "--duration", "0.3", "-o", out, "--format", "json"
        )
        assert code == 1
        assert err[-1] == (f"edgepipe: error: cannot write {out}: no space left on device (no trace file "
                           "written; the summary is on stdout)")  # fmt: skip
        assert not any("internal error" in line for line in err)
        summary = json.loads(stdout[stdout.index("{\n") :])  # after what hello.py printed
        assert summary["trace_file"] is None  # the summary, all the same
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no partial JSON, no temporary file


def test_an_empty_model_is_the_same_one_line_for_quantize_and_check_ops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    lines = [
        edgepipe(capsys, "quantize", empty, "--calib", empty),
        edgepipe(capsys, "check-ops", empty, "--target", "cpu"),
    ]
    same = (2, "", [f"edgepipe: error: model {empty}: empty file (0 bytes) (not an ONNX model?)"])
    assert lines[0] == lines[1] == same
    empty.write_text("not protobuf")
    code, _, err = edgepipe(capsys, "quantize", empty, "--list-nodes")
    assert (code, err) == (2, [f"edgepipe: error: {empty}: not an ONNX model (Error parsing message with type "
                                "'onnx.ModelProto': Wire format was corrupt)"])  # fmt: skip


LONG = "m" * 300 + ".onnx"
"""A name longer than any Linux file system takes: pathlib raises where os.path answers False."""


@pytest.mark.parametrize(
    "args",
    [["quantize", LONG, "--calib", "x.mp4"], ["compare", LONG, LONG], ["check-ops", LONG, "--target", "cpu"],
     ["plan", LONG], ["trace", LONG + ".py", "--duration", "1"], ["doctor", LONG]],
)  # fmt: skip
def test_a_name_too_long_is_one_line_not_an_internal_error(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code, _, err = edgepipe(capsys, *args)
    assert code == 2
    [line] = err
    assert line.startswith("edgepipe: error: ")
    assert "internal error" not in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "--param-count", "3.5"], "expected a count of parameters: a positive whole number"),
        (["plan", "--param-count", "-3e9"], "expected a count of parameters: a positive whole number"),
        (["plan", "--param-count=-3e9"], "expected a count of parameters: a positive whole number"),
        (["plan", "--param-count", "3e9", "--tokens-per-s", "-1e3"], "--tokens-per-s: expected a positive number"),
        (["plan", "--param-count", "3e9", "--resolution", "-5x3", "--streams", "1"], "--resolution -5x3: expected a positive"),
        (["compare", "--seed=-5", "a.onnx", "b.onnx"], "--seed: expected a whole number of at least 0, got '-5'"),
        (["compare", "--seed", "-5", "a.onnx", "b.onnx"], "--seed: expected a whole number of at least 0, got '-5'"),
        (["compare", "a.onnx", "b.onnx", "--input-size", "100000"], "--input-size: expected a side in pixels from 32"),
        (["quantize", "a.onnx", "--input-size", "1e5"], "--input-size: expected a side in pixels from 32"),
        (["doctor", "x", "--timeout-s", "-1"], "--timeout-s: expected a positive number of seconds, at most 86400"),
        (["doctor", "x", "--timeout-s", "1e300"], "--timeout-s: expected a positive number of seconds, at most 86400"),
    ],
)  # fmt: skip
def test_numbers_are_refused_in_one_line_before_any_work(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = edgepipe(capsys, *args)
    assert code == 2
    assert message in err[-1]
    assert not any("internal error" in line for line in err)


def test_a_parameter_count_is_planned_exactly(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = edgepipe(capsys, "plan", "--param-count", "3e9", "--format", "json")
    assert code == 0
    assert json.loads(out)["models"][0]["params"] == 3_000_000_000


def test_random_inputs_past_the_memory_plan_are_refused_naming_the_shape_and_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = add_model(tmp_path / "add.onnx", shape=(1, 3, "H", "W"))
    code, _, err = edgepipe(capsys, "compare", model, model, "--shape", "1x3x100000x100000")
    assert code == 2
    [line] = err
    assert "x 1x3x100000x100000 float32: 360000000000 bytes) needs 360.00 GB" in line
    assert "give --shape smaller sizes" in line


def test_a_file_name_that_is_not_utf8_is_printed_as_its_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = os.fsencode(tmp_path) + "/模型.onnx".encode("gbk")
    add_model(Path(os.fsdecode(raw)))
    strict = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # errors="strict", as outside the C locale
    monkeypatch.setattr(sys, "stdout", strict)
    code, _, err = edgepipe(capsys, "check-ops", os.fsdecode(raw), "--target", "cpu", "--no-session")
    assert (code, err) == (0, [])
    strict.flush()
    assert raw in strict.buffer.getvalue()  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_clip_not_decoded_in_time_is_not_checked_and_never_called_damaged(
    clip: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = edgepipe(capsys, "doctor", clip, "--timeout-s", "0.001")  # a healthy clip
    # Exit 1, not 0: nothing was verified; not 2: the command line was right.
    assert code == 1
    assert out.splitlines()[0].endswith(": not checked in time (raise --timeout-s): the decoder gave no answer "
                                        "within 0.001 s and was stopped")  # fmt: skip
    assert "doctor: 0 of 1 files with problems; 1 not checked in time" in out
    assert err == [f"edgepipe: error: 1 file not checked in time ({clip}): the decoder passed --timeout-s 0.001; "
                   "raise it"]  # fmt: skip
    assert "damaged" not in out
    code, out, _ = edgepipe(capsys, "doctor", clip, "--timeout-s", "0.001", "--format", "json")
    report = json.loads(out)
    assert (code, report["with_problems"], report["not_checked"]) == (1, 0, 1)
    assert report["files"][0]["problems"] == []
    assert report["files"][0]["unchecked"].startswith("not checked in time (raise --timeout-s)")
