"""``edgepipe run FILE --help`` (and ``graph``) lists the pipeline's own parameters: the command's
``main`` in this process (a help starts nothing; tests/cli/test_main.py runs the command itself)."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from edgepipe.cli.params_help import add_parameters
from edgepipe.core.errors import PipelineFileError
from edgepipe.pipefile.loader import Param, PipelineFunction
from tests.cli.test_main import BAD_FILES, write
from tests.support.cli_process import Command, in_process

PIPELINE = '''\
    from __future__ import annotations
    import enum, json, sys
    from pathlib import Path
    from typing import Annotated, Literal
    from edgepipe import Pipeline, Range, WritableFile, WritableFolder

    class Mode(enum.Enum):
        FAST = "fast"
        EXACT = "exact"

    def pipeline(
        name: str = "cam",
        fps: Annotated[float, Range(0, 60, low_open=True)] = 15.0,
        count: Annotated[int, Range(1, 9)] = 3,
        size: Literal["small", "large"] = "small",
        mode: Mode = Mode.FAST,
        enabled: bool = False,
        model: Path | None = None,
        record: Annotated[str, WritableFile()] = "",
        clips: Annotated[str, WritableFolder()] = "",
        every_s: Annotated[float, Range(0, low_open=True)] | None = None,
        label: str = "",
    ) -> Pipeline:
        """Counts to COUNT, for the tests of --help and --params (100% synthetic, no %(prog)s).

        Args:
            name: what the pipeline is called.
            fps: frames per second of the
                imaginary camera.
            count: how many items the source gives.
            size: the picture size.
            enabled: whether it is on.
            every_s: how often, at 50% load.
        """
        values = dict(name=name, fps=fps, count=count, size=size, mode=mode.name, enabled=enabled,
                      model=None if model is None else str(model), record=record, every_s=every_s, label=label)
        print("PARAMS " + json.dumps(values), file=sys.stderr)
        p = Pipeline(name)
        p.sink("out", lambda item: None, inputs=p.source("src", list(range(count))))
        return p
'''


@pytest.fixture
def edgepipe(capsys: pytest.CaptureFixture[str]) -> Command:
    """``edgepipe ARGS`` in this process, ``COLUMNS`` 250 unless given: wide enough that argparse
    wraps no help line (each is matched whole)."""

    def run(*args: str, columns: int = 250) -> subprocess.CompletedProcess[str]:
        return in_process(capsys, *args, env={"COLUMNS": str(columns)})

    return run


@pytest.mark.parametrize("command", ["run", "graph"])
def test_help_with_a_file_lists_its_parameters_after_the_options(
    edgepipe: Command, tmp_path: Path, command: str
) -> None:
    path = write(tmp_path, PIPELINE)
    result = edgepipe(command, str(path), "--help")
    assert result.returncode == 0, result.stderr
    assert "PARAMS" not in result.stderr  # read from the signature: pipeline() is not called
    out = result.stdout
    assert out.startswith(f"usage: edgepipe {command} ")
    section = out.index(f"parameters of {path}:")
    assert section > out.index("--debug") > out.index("--params PATH")  # after the command's options
    assert (
        "Counts to COUNT, for the tests of --help and --params (100% synthetic, no %(prog)s)."
        in out[section:]
    )
    expected = [
        r"--name TEXT +what the pipeline is called \(text; default: cam\)",
        r"--fps FLOAT +frames per second of the imaginary camera \(float in \(0, 60\]; default: 15\.0\)",
        r"--count INT +how many items the source gives \(int in \[1, 9\]; default: 3\)",
        r"--size \{small,large\} +the picture size \(default: small\)",
        r"--mode \{FAST,EXACT\} +default: FAST",  # no help text: the details alone
        r"--enabled, --no-enabled +whether it is on \(default: false\)",
        r"--model PATH +path or none; default: none",
        r"--record FILE +a writable file path, '' for none; default: ''",
        r"--clips DIR +a writable folder, '' for none; default: ''",
        r"--every-s FLOAT +how often, at 50% load \(float more than 0 or none; default: none\)",
        r"--label TEXT +text; default: ''",
    ]
    lines = [" ".join(line.split()) for line in re.split(r"\n(?=  --)", out[section:])]  # one per parameter
    for pattern in expected:
        assert any(re.fullmatch(pattern, line) for line in lines), f"{pattern!r} not in:\n{out[section:]}"
    assert len([line for line in lines if line.startswith("--")]) == len(expected)


def test_help_of_a_shipped_pipeline_at_the_terminals_width(edgepipe: Command) -> None:
    result = edgepipe("run", "pipelines/demo.py", "--help", columns=100)
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    section = result.stdout[result.stdout.index("parameters of pipelines/demo.py:") :]
    words = " ".join(section.split())  # unwrapped
    assert (
        "--threshold INT how much a pixel's luma (0-255) must change between frames to count as motion "
        in words
    )
    assert "(int in [0, 255]; default: 40)" in words
    assert "--every INT run the face detector on one frame in this many" in words


def test_help_without_a_file_is_the_commands_own(edgepipe: Command) -> None:
    for command in ("run", "graph"):
        result = edgepipe(command, "--help")
        assert result.returncode == 0, result.stderr
        assert "--params PATH" in result.stdout
        assert "parameters of" not in result.stdout
        assert result.stderr == ""


LOAD_ERRORS = {
    **{case: BAD_FILES[case] for case in ("syntax", "no_function")},  # the others fail in pipeline()
    "import": ("import no_such_module\n", r"bad\.py:1: ModuleNotFoundError: No module named 'no_such_module'"),
    "annotation": ("from __future__ import annotations\ndef pipeline(x: Undefined = 1): ...\n",
                   r"bad\.py:2: the annotations of pipeline\(\) cannot be read"),
    "reserved": ("def pipeline(params: str = ''): ...\n", r"bad\.py:1: pipeline\(\) parameter 'params' would be "
                 r"--params, which is reserved for a parameter file \(--params FILE\.toml\); rename it"),
    "reserved_no": ("def pipeline(governor: bool = True): ...\n", r"bad\.py:1: pipeline\(\) parameter 'governor' is "
                    r"a bool, so --no-governor would set it false, but --no-governor is an option of edgepipe run; "
                    r"rename it"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(LOAD_ERRORS))
def test_help_with_a_file_that_cannot_be_loaded_says_why_in_one_line(
    edgepipe: Command, tmp_path: Path, case: str
) -> None:
    body, message = LOAD_ERRORS[case]
    path = write(tmp_path, body, "bad.py")
    result = edgepipe("run", str(path), "--help")
    assert result.returncode == 2
    assert "--duration SECONDS" in result.stdout  # the command's help is still shown
    assert "parameters of" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert re.search(
        r"^edgepipe: error: .*" + message + r".* \(so its parameters cannot be listed\)$", lines[0]
    )


def test_help_names_a_missing_file(edgepipe: Command, tmp_path: Path) -> None:
    result = edgepipe("graph", str(tmp_path / "nope.py"), "-h")
    assert result.returncode == 2
    assert result.stdout.startswith("usage: edgepipe graph")
    assert result.stderr == f"edgepipe: error: {tmp_path / 'nope.py'}: no such pipeline file (give the path of a .py " \
                            "file) (so its parameters cannot be listed)\n"  # fmt: skip


def test_a_parameter_whose_flag_is_taken_is_refused_before_any_is_added() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quiet", action="store_true")
    params = (Param("fps", float, 1.0), Param("quiet", bool, False))
    with pytest.raises(
        PipelineFileError, match=r"^p\.py:3: pipeline\(\) parameter 'quiet' would be --quiet, which is taken"
    ):
        add_parameters(parser, PipelineFunction("p.py", lambda: None, 3, params))
    assert "parameters of" not in parser.format_help()  # not half a list: --help prints the rest, exit 2


REQUIRED_MODEL = """\
    from pathlib import Path
    from typing import Annotated
    from edgepipe import Pipeline
    from edgepipe.lm import ModelFolder

    def pipeline(model: Annotated[Path | None, ModelFolder()] = None) -> Pipeline:
        \"\"\"A model's folder, refused when not given.

        Args:
            model: the language model's folder.
        \"\"\"
        return Pipeline("p")
"""


def test_a_parameter_that_must_be_given_reads_as_required(edgepipe: Command, tmp_path: Path) -> None:
    result = edgepipe("run", str(write(tmp_path, REQUIRED_MODEL, "req.py")), "--help")  # None refused
    assert result.returncode == 0, result.stderr
    (model,) = [
        " ".join(line.split()) for line in re.split(r"\n(?=  --)", result.stdout) if "--model" in line
    ]
    assert model.endswith("(a folder with model.onnx and tokenizer.json; required)"), model
    assert "none" not in model
    # describe_scene's --model may be left out when --server is given: its help says so
    scene = edgepipe("run", "pipelines/describe_scene.py", "--help").stdout
    assert "or none; default: none)" in " ".join(scene.split())
