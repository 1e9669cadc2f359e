from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from edgepipe.core.errors import GraphError, ParameterError, PipelineFileError
from edgepipe.pipefile.loader import load_pipeline, read_pipeline
from edgepipe.runtime.stopsignals import StopRequested

HEADER = """\
from __future__ import annotations
import enum
from pathlib import Path
from typing import Literal
from edgepipe import Pipeline

class Mode(enum.Enum):
    FAST = "fast"
    EXACT = "exact"

"""

PARAMS = HEADER + textwrap.dedent("""\
    def pipeline(
        fps: float = 15.0,
        count: int = 3,
        name: str = "cam",
        enabled: bool = False,
        mode: Mode = Mode.FAST,
        size: Literal["small", "large"] = "small",
        out: Path | None = None,
        untyped=7,
    ) -> Pipeline:
        p = Pipeline(name)
        p.params = dict(fps=fps, count=count, enabled=enabled, mode=mode, size=size, out=out, untyped=untyped)
        src = p.source("src", list(range(count)))
        p.sink("out", print, inputs=src)
        return p
""")


def write(tmp_path: Path, text: str, name: str = "p.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_parameters_are_converted_by_annotation(tmp_path: Path) -> None:
    path = write(tmp_path, PARAMS)
    p = load_pipeline(path, ["--fps", "30", "--count=5", "--enabled", "--mode", "EXACT",
                             "--size", "large", "--out", "x.mp4", "--untyped", "9", "--name", "door"])  # fmt: skip
    assert p.name == "door"
    assert p.params == {  # type: ignore[attr-defined]
        "fps": 30.0, "count": 5, "enabled": True, "mode": p.params["mode"].__class__.EXACT,  # type: ignore[attr-defined]
        "size": "large", "out": Path("x.mp4"), "untyped": 9,
    }  # fmt: skip
    defaults = load_pipeline(path, [])
    assert defaults.params["fps"] == 15.0
    assert defaults.params["out"] is None
    negated = load_pipeline(path, ["--enabled", "--no-enabled"])
    assert negated.params["enabled"] is False  # type: ignore[attr-defined]
    explicit = load_pipeline(path, ["--enabled", "false", "--out", "none"])
    assert explicit.params["enabled"] is False
    assert explicit.params["out"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fsp", "30"], r"unknown parameter --fsp; did you mean --fps\?"),
        (["--fps", "fast"], r"--fps: expected a number, got 'fast'"),
        (["--count", "2.5"], r"--count: expected an integer, got '2.5'"),
        (["--mode", "slow"], r"--mode: expected one of 'FAST', 'EXACT', got 'slow'"),
        (["--size", "huge"], r"--size: expected one of 'small', 'large', got 'huge'"),
        (["--fps"], r"--fps needs a value"),
        (["stray"], r"unexpected argument 'stray'"),
    ],
)
def test_bad_parameters_name_the_file_line_and_parameter(
    tmp_path: Path, args: list[str], message: str
) -> None:
    path = write(tmp_path, PARAMS)
    with pytest.raises(ParameterError, match=r"p\.py:11: " + message):
        load_pipeline(path, args)


def test_missing_required_parameter(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "def pipeline(source: str) -> Pipeline:\n    return Pipeline()\n")
    with pytest.raises(ParameterError, match=r"p\.py:11: missing required parameter\(s\): --source"):
        load_pipeline(path, [])


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(
        tmp_path, "from edgepipe import Pipeline\n\ndef pipeline() -> Pipeline\n    return Pipeline()\n"
    )
    with pytest.raises(PipelineFileError, match=r"p\.py:3: syntax error: expected ':'"):
        load_pipeline(path)


def test_import_time_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "from edgepipe import Pipeline\nimport nonexistent_module_xyz\n")
    with pytest.raises(
        PipelineFileError, match=r"p\.py:2: ModuleNotFoundError: No module named 'nonexistent_module_xyz'"
    ):
        load_pipeline(path)


def test_missing_file_and_missing_function(tmp_path: Path) -> None:
    with pytest.raises(PipelineFileError, match=r"nope\.py: no such pipeline file"):
        load_pipeline(tmp_path / "nope.py")
    path = write(tmp_path, "x = 1\n")
    with pytest.raises(PipelineFileError, match=r"p\.py: defines no pipeline\(\) function"):
        load_pipeline(path)


def test_pipeline_function_that_raises_or_returns_the_wrong_thing(tmp_path: Path) -> None:
    raising = write(
        tmp_path, HEADER + "def pipeline() -> Pipeline:\n    p = Pipeline()\n    return p.nodes[5]\n", "r.py"
    )
    with pytest.raises(PipelineFileError, match=r"r\.py:13: pipeline\(\) raised IndexError"):
        load_pipeline(raising)
    wrong = write(tmp_path, HEADER + "def pipeline():\n    Pipeline()\n", "w.py")
    with pytest.raises(
        PipelineFileError,
        match=r"w\.py:11: pipeline\(\) returned NoneType, not a Pipeline; end it with `return p`",
    ):
        load_pipeline(wrong)


def test_declaration_error_points_at_the_pipeline_file(tmp_path: Path) -> None:
    text = HEADER + textwrap.dedent("""\
        def pipeline() -> Pipeline:
            p = Pipeline()
            p.source("cam", [1])
            p.source("cam", [2])
            return p
    """)
    path = write(tmp_path, text)
    with pytest.raises(GraphError, match=r"p\.py:14: node 'cam': duplicate node id"):
        load_pipeline(path)


CONSTRAINED = textwrap.dedent("""\
    from __future__ import annotations
    from pathlib import Path
    from typing import Annotated
    from edgepipe import Pipeline, Range, WritableFile

    def pipeline(
        input_size: Annotated[int, Range(32, 4096)] = 640,
        threshold: Annotated[float, Range(0, 1)] = 0.5,
        every_s: Annotated[float, Range(0, low_open=True)] | None = None,
        output: Annotated[Path, WritableFile()] = Path("out.mp4"),
        record: Annotated[str, WritableFile()] = "",
        plain: float = 1.0,
    ) -> Pipeline:
        p = Pipeline("constrained")
        p.params = dict(input_size=input_size, threshold=threshold, every_s=every_s, output=output)
        p.sink("out", print, inputs=p.source("src", [1]))
        return p
""")


def test_annotated_constraints_pass_good_values_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, CONSTRAINED)
    out = tmp_path / "rec.mp4"
    p = load_pipeline(
        path, ["--input-size", "32", "--threshold", "1", "--every-s", "0.5", "--output", str(out)]
    )
    assert p.params == {"input_size": 32, "threshold": 1.0, "every_s": 0.5, "output": out}  # type: ignore[attr-defined]
    assert load_pipeline(path, ["--every-s", "none"]).params["every_s"] is None  # type: ignore[attr-defined]
    assert sorted(f.name for f in tmp_path.iterdir()) == ["p.py"]  # the writable checks left nothing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input-size", "-3"], r"--input-size: expected a number in \[32, 4096\], got '-3'"),
        (["--input-size", "5000"], r"--input-size: expected a number in \[32, 4096\], got '5000'"),
        (["--threshold", "1.5"], r"--threshold: expected a number in \[0, 1\], got '1.5'"),
        (["--threshold", "nan"], r"--threshold: expected a number, got 'nan'"),
        (["--plain", "nan"], r"--plain: expected a number, got 'nan'"),
        (["--every-s", "0"], r"--every-s: expected a number more than 0, got '0'"),
        (["--output", "missing/x.mp4"], r"--output: expected a file path in an existing folder "
                                        r"\(missing does not exist; create it first\)"),
        (["--record", "."], r"--record: expected a file path, not a folder"),
    ],
)  # fmt: skip
def test_a_value_outside_its_constraint_names_the_parameter_and_what_it_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, CONSTRAINED)
    with pytest.raises(ParameterError, match=r"p\.py:6: " + message):
        load_pipeline(path, args)


def test_defaults_are_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = CONSTRAINED.replace('Path("out.mp4")', 'Path("missing/out.mp4")')
    path = write(tmp_path, text)
    with pytest.raises(ParameterError, match=r"--output: expected a file path in an existing folder .*"
                                              r"got PosixPath\('missing/out.mp4'\) \(its default\)"):  # fmt: skip
        load_pipeline(path, [])


def test_an_annotation_naming_what_is_not_imported_is_refused_not_ignored(tmp_path: Path) -> None:
    text = CONSTRAINED.replace(
        "from edgepipe import Pipeline, Range, WritableFile", "from edgepipe import Pipeline"
    )
    path = write(tmp_path, text)
    with pytest.raises(PipelineFileError, match=r"p\.py:6: the annotations of pipeline\(\) cannot be read: "
                                                r"NameError: name 'Range' is not defined"):  # fmt: skip
        load_pipeline(path, ["--input-size", "-3"])


def test_a_return_annotation_for_type_checkers_only_is_no_obstacle(tmp_path: Path) -> None:
    text = CONSTRAINED.replace(") -> Pipeline:\n", ") -> OnlyForTypeCheckers:\n", 1)
    path = write(tmp_path, text)
    with pytest.raises(ParameterError, match=r"--input-size: expected a number in \[32, 4096\], got '-3'"):
        load_pipeline(path, ["--input-size", "-3"])


def test_a_parameter_file_sets_values_and_the_command_line_wins(tmp_path: Path) -> None:
    path = write(tmp_path, PARAMS)
    toml = tmp_path / "camera.toml"
    toml.write_text('fps = 30\nname = "door"\nmode = "EXACT"\nsize = "large"\nenabled = true\n')
    p = load_pipeline(path, ["--fps", "5", "--no-enabled"], params_file=toml)
    assert p.name == "door"
    assert p.params["fps"] == 5.0  # type: ignore[attr-defined]
    assert p.params["enabled"] is False  # type: ignore[attr-defined]
    assert p.params["mode"].name == "EXACT"  # type: ignore[attr-defined]
    assert p.params["size"] == "large"  # type: ignore[attr-defined]
    assert p.params["count"] == 3  # type: ignore[attr-defined]  # neither: its default


def test_a_command_line_value_overrides_an_out_of_range_file_value_but_is_itself_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, CONSTRAINED)
    toml = tmp_path / "camera.toml"
    toml.write_text('output = "/nonexistent/out.mp4"\ninput_size = 64\n')
    p = load_pipeline(path, ["--output", "here.mp4"], params_file=toml)
    assert p.params["output"] == Path("here.mp4")  # type: ignore[attr-defined]
    assert p.params["input_size"] == 64  # type: ignore[attr-defined]
    with pytest.raises(
        ParameterError, match=r"camera\.toml:1: output: expected a file path in an existing folder"
    ):
        load_pipeline(path, [], params_file=toml)
    with pytest.raises(
        ParameterError, match=r"p\.py:6: --input-size: expected a number in \[32, 4096\], got '8'"
    ):
        load_pipeline(path, ["--input-size", "8", "--output", "here.mp4"], params_file=toml)


def test_a_required_parameter_may_come_from_the_file(tmp_path: Path) -> None:
    text = PARAMS.replace("fps: float = 15.0,", "*, fps: float = 15.0,").replace(
        "count: int = 3,", "count: int,"
    )
    path = write(tmp_path, text)
    with pytest.raises(ParameterError, match="missing required parameter"):
        load_pipeline(path, [])
    toml = tmp_path / "camera.toml"
    toml.write_text("count = 2\n")
    assert load_pipeline(path, [], params_file=toml).params["count"] == 2  # type: ignore[attr-defined]
    assert load_pipeline(path, ["--count", "1"], params_file=toml).params["count"] == 1  # type: ignore[attr-defined]


def test_a_parameter_named_params_is_refused_it_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, PARAMS.replace("untyped=7,", "params: str = '',"))
    with pytest.raises(PipelineFileError, match=r"p\.py:\d+: pipeline\(\) parameter 'params' would be --params, "
                                                r"which is reserved for a parameter file .*; rename it"):  # fmt: skip
        load_pipeline(path, [])


def test_a_parameter_that_takes_a_flag_of_the_command_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, PARAMS)
    spec = read_pipeline(path, reserved={"--port": "an option of edgepipe run"})
    assert [p.name for p in spec.params] == [
        "fps",
        "count",
        "name",
        "enabled",
        "mode",
        "size",
        "out",
        "untyped",
    ]
    with pytest.raises(PipelineFileError, match=r"parameter 'count' would be --count, which is an option of "
                                                r"edgepipe run; rename it"):  # fmt: skip
        read_pipeline(path, reserved={"--count": "an option of edgepipe run"})


def test_a_pipeline_file_gets_no_future_flags_of_the_loader(tmp_path: Path) -> None:
    # The loader module itself uses `from __future__ import annotations`; a pipeline file
    # without it keeps its annotations evaluated at definition, as Python runs it.
    path = write(
        tmp_path,
        textwrap.dedent("""\
        from edgepipe import Pipeline

        def pipeline(fps: float = 1.0) -> Pipeline:
            p = Pipeline("plain")
            p.params = {"annotation": pipeline.__annotations__["fps"]}
            p.sink("out", print, inputs=p.source("src", [1]))
            return p
    """),
    )
    assert load_pipeline(path).params["annotation"] is float


def test_a_bools_no_flag_is_checked_against_the_commands_flags_and_the_other_parameters(
    tmp_path: Path,
) -> None:
    gov = write(tmp_path, HEADER + "def pipeline(governor: bool = True) -> Pipeline: ...\n", "gov.py")
    with pytest.raises(PipelineFileError, match=r"gov\.py:11: pipeline\(\) parameter 'governor' is a bool, so "
                       r"--no-governor would set it false, but --no-governor is an option of edgepipe run; "
                       r"rename it$"):  # fmt: skip
        read_pipeline(gov, reserved={"--no-governor": "an option of edgepipe run"})
    both = write(
        tmp_path, HEADER + "def pipeline(x: bool = True, no_x: str = '') -> Pipeline: ...\n", "both.py"
    )
    with pytest.raises(PipelineFileError, match=r"parameter 'no_x' would be --no-x, which is also a flag of "
                                                r"parameter 'x' \(--x/--no-x\); rename it$"):  # fmt: skip
        read_pipeline(both)


def test_a_value_that_starts_with_a_dash(tmp_path: Path) -> None:
    path = write(tmp_path, PARAMS)
    p = load_pipeline(path, ["--fps", "-1e3", "--count", "-2", "--name=-q", "--untyped", "-7"])
    values = p.params  # type: ignore[attr-defined]
    assert (values["fps"], values["count"], values["untyped"], p.name) == (-1000.0, -2, -7, "-q")
    with pytest.raises(ParameterError, match=r"--name needs a value \(one that starts with '-' is given as "
                                             r"--name=VALUE\)$"):  # fmt: skip
        load_pipeline(path, ["--name", "--count", "2"])  # not name='--count', then a stray '2'


def test_a_none_default_that_a_constraint_refuses_is_required(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + textwrap.dedent("""\
        from typing import Annotated

        class Given:
            def check(self, value):
                if value is None:
                    raise ValueError("a folder with a model in it")

        def pipeline(model: Annotated[Path | None, Given()] = None) -> Pipeline:
            p = Pipeline("m")
            p.sink("out", print, inputs=p.source("src", [model]))
            return p
    """))  # fmt: skip
    with pytest.raises(ParameterError, match=r"p\.py:\d+: --model is required: a folder with a model in it$"):
        load_pipeline(path, [])
    with pytest.raises(ParameterError, match=r"--model: expected a folder with a model in it, got 'none'$"):
        load_pipeline(path, ["--model", "none"])
    assert load_pipeline(path, ["--model", "m"]).name == "m"


def test_sys_exit_at_import_is_a_file_error_saying_nothing_ran(tmp_path: Path) -> None:
    path = write(tmp_path, "import sys\nsys.exit(0)\n")
    with pytest.raises(PipelineFileError, match=r"p\.py:2: called sys\.exit\(0\) at import; nothing ran"):
        read_pipeline(path)


def test_sys_exit_in_pipeline_is_a_file_error_naming_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "def pipeline():\n    raise SystemExit('no camera')\n")
    with pytest.raises(PipelineFileError, match=r"p\.py:2: pipeline\(\) called sys\.exit\('no camera'\)"):
        read_pipeline(path).call([])


def test_a_stop_signal_cutting_an_import_short_is_a_stop_not_a_broken_file(tmp_path: Path) -> None:
    # What a C extension does when SIGTERM lands in its import: ImportError, the stop as context.
    text = (
        "from edgepipe.runtime.stopsignals import StopRequested\n"
        "try:\n    raise StopRequested(15)\n"
        "except StopRequested:\n    raise ImportError('initialization failed')\n"
    )
    with pytest.raises(StopRequested):
        read_pipeline(write(tmp_path, text))


def test_a_fifo_given_as_the_pipeline_file_is_named_as_one(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "p.py")
    with pytest.raises(PipelineFileError, match=r"p\.py: is a FIFO \(named pipe\), not a pipeline file"):
        read_pipeline(str(tmp_path / "p.py"))
