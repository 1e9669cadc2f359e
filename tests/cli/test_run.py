"""``edgepipe run``/``graph`` with ``--params FILE.toml``, and the flags a pipeline parameter may
not take: real subprocesses, as a user runs them."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from edgepipe.cli import main as cli
from tests.cli.test_main import edgepipe, write
from tests.cli.test_params_help import PIPELINE

pytestmark = pytest.mark.slow


def passed(stderr: str) -> dict[str, Any]:
    """What pipeline() was called with (it prints them)."""
    lines = [line for line in stderr.splitlines() if line.startswith("PARAMS ")]
    assert len(lines) == 1, stderr
    return json.loads(lines[0].removeprefix("PARAMS "))  # type: ignore[no-any-return]


def test_params_file_sets_the_parameters_and_the_command_line_wins(tmp_path: Path) -> None:
    path = write(tmp_path, PIPELINE)
    toml = tmp_path / "camera.toml"
    toml.write_text('name = "door"\nfps = 30          # an integer for a float\ncount = "5"\nsize = "large"\n'
                    'mode = "EXACT"\nenabled = true\nmodel = "m.onnx"\nevery-s = 2.5\n')  # fmt: skip
    graph = edgepipe("graph", str(path), "--params", str(toml))
    assert graph.returncode == 0, graph.stderr
    assert graph.stdout.startswith("pipeline 'door': ")
    from_file = {"name": "door", "fps": 30.0, "count": 5, "size": "large", "mode": "EXACT", "enabled": True,
                 "model": "m.onnx", "record": "", "every_s": 2.5, "label": ""}  # fmt: skip
    assert passed(graph.stderr) == from_file
    run = edgepipe("run", str(path), "--count", "2", "--params", str(toml), "--no-enabled", "--model", "none")
    assert run.returncode == 0, run.stderr
    assert passed(run.stderr) == {**from_file, "count": 2, "enabled": False, "model": None}
    plan = edgepipe("run", str(path), f"--params={toml}", "--plan", "--name", "porch")
    assert plan.returncode == 0, plan.stderr
    assert passed(plan.stderr) == {**from_file, "name": "porch"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\ncuont = 2\n', r"camera\.toml:2: unknown parameter 'cuont'; did you mean 'count'\? \(parameters: "
                                    r"clips, count, enabled, every_s, fps, label, mode, model, name, record, size\)"),
        ("fps = .5\n", r"camera\.toml:1: not valid TOML: Invalid value at column 7: fps = \.5"),
        ("count = 12\n", r"camera\.toml:1: count: expected a number in \[1, 9\], got 12"),
        ('fps = "fast"\n', r"camera\.toml:1: fps: expected a number, got 'fast'"),
        ("name = 7\n", r"camera\.toml:1: name: expected a string \(in quotes\), got 7"),
        ("[pipeline]\ncount = 2\n", r"camera\.toml:1: \[pipeline\] is a table; parameters are top-level"),
    ],
)  # fmt: skip
def test_a_wrong_params_file_is_exit_2_naming_the_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, PIPELINE)
    toml = tmp_path / "camera.toml"
    toml.write_text(text)
    for command in ("run", "graph"):
        result = edgepipe(command, str(path), "--params", str(toml))
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr  # one line, no traceback, and pipeline() was not called
        assert lines[0].startswith(f"edgepipe: error: {toml}"), lines[0]
        assert re.search(message, lines[0]), lines[0]


def test_a_missing_params_file_is_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, PIPELINE)
    result = edgepipe("run", str(path), "--params", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert result.stderr == f"edgepipe: error: {tmp_path / 'nope.toml'}: no such parameter file (give the path " \
                            "of a .toml file)\n"  # fmt: skip


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("params", r"reserved for a parameter file \(--params FILE\.toml\)"),
        ("loop", "an option of edgepipe run"),
        ("format", "an option of edgepipe graph"),
        ("debug", "an option of edgepipe run and edgepipe graph"),
    ],
)
def test_a_parameter_that_could_never_be_given_is_refused(tmp_path: Path, name: str, reason: str) -> None:
    path = write(tmp_path, PIPELINE.replace('label: str = "",', f'label: str = "", {name}: str = "",'))
    for command in ("run", "graph"):
        result = edgepipe(command, str(path))
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        expected = (
            rf"p\.py:\d+: pipeline\(\) parameter '{name}' would be --{name}, which is {reason}; rename it\n$"
        )
        assert re.search(expected, result.stderr), result.stderr


def test_params_is_the_parameter_file_on_every_subcommand_that_has_it() -> None:
    def walk(parser: argparse.ArgumentParser, path: str) -> dict[str, argparse.ArgumentParser]:
        found = {path: parser}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.update(walk(sub, f"{path} {name}"))
        return found

    commands = walk(cli._parser(), "edgepipe")
    with_params = {
        path: p for path, p in commands.items() for a in p._actions if "--params" in a.option_strings
    }
    assert sorted(with_params) == ["edgepipe graph", "edgepipe plan", "edgepipe run", "edgepipe trace"]
    for parser in with_params.values():
        (action,) = [a for a in parser._actions if "--params" in a.option_strings]
        assert action.help is not None
        assert "TOML file" in action.help
    assert "edgepipe models list" in commands  # the walk reaches nested subcommands


def test_the_documented_camera_toml_is_accepted_by_the_pipeline_it_names(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "pipelines.md").read_text()
    (block,) = re.findall(r"```toml\n(# camera\.toml.*?)```", readme, re.S)
    (pipeline,) = re.findall(r"`edgepipe run (pipelines/\S+\.py) --params camera\.toml[^`]*`", readme)
    toml = tmp_path / "camera.toml"
    toml.write_text(block)
    result = edgepipe("graph", pipeline, "--params", str(toml))
    assert result.returncode == 0, result.stderr


def test_an_empty_path_is_none_on_the_command_line_and_in_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, PIPELINE)  # model: Path | None
    toml = tmp_path / "camera.toml"
    toml.write_text('model = ""\n')
    for args in (["--model", ""], ["--model="], ["--params", str(toml)]):
        result = edgepipe("graph", str(path), *args)
        assert result.returncode == 0, result.stderr
        assert passed(result.stderr)["model"] is None  # not Path('.')


def test_a_bool_whose_no_flag_is_an_option_of_run_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, PIPELINE.replace('label: str = "",', 'label: str = "", governor: bool = True,'))
    result = edgepipe("run", str(path), "--no-governor")  # else run's own --no-governor takes it
    assert result.returncode == 2, result.stderr
    assert "PARAMS" not in result.stderr
    assert result.stderr.endswith("parameter 'governor' is a bool, so --no-governor would set it false, but "
                                  "--no-governor is an option of edgepipe run; rename it\n")  # fmt: skip


def test_values_that_start_with_a_dash(tmp_path: Path) -> None:
    path = write(tmp_path, PIPELINE)
    result = edgepipe("graph", str(path), "--label=-q", "--every-s", "-0.5")
    assert result.returncode == 2
    assert result.stderr.endswith("--every-s: expected a number more than 0, got '-0.5'\n")  # it got there
    result = edgepipe("graph", str(path), "--label=-q", "--every-s", "-1e3", "--label", "-q")
    assert result.returncode == 2  # the second -q was graph's --quiet
    assert result.stderr.endswith(
        "--label needs a value (one that starts with '-' is given as --label=VALUE)\n"
    )
    result = edgepipe("graph", str(path), "--label=-q", "--name", "-x")
    assert result.returncode == 0, result.stderr
    assert passed(result.stderr)["label"] == "-q"
    assert passed(result.stderr)["name"] == "-x"  # no option of graph's: it reaches the parameter


@pytest.mark.slow
def test_an_unknown_model_name_is_a_usage_error_before_anything_runs() -> None:
    done = edgepipe("run", "pipelines/face_privacy.py", "--model", "centerfce", "--duration", "1")
    assert done.returncode == 2, done.stderr
    assert "did you mean 'centerface'?" in done.stderr
    assert "decoding" not in done.stderr  # no camera was opened
