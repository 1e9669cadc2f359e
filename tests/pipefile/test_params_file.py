from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Annotated, Literal

import pytest

from edgepipe.core.checks import Range
from edgepipe.core.errors import ParameterError
from edgepipe.pipefile.params import WritableFile
from edgepipe.pipefile.params_file import read_param_file
from edgepipe.pipefile.signature import Param, parameters


def pipeline(
    source: str = "synthetic://640x480@15",
    threshold: Annotated[float, Range(0, 1)] = 0.35,
    input_size: Annotated[int, Range(32, 4096)] = 640,
    realtime: bool = False,
    size: Literal["small", "large"] = "small",
    model: Path | None = None,
    output: Annotated[str, WritableFile()] = "",
) -> None: ...


PARAMS = parameters(pipeline)


def read(
    tmp_path: Path, text: str, params: list[Param] = PARAMS, overridden: frozenset[str] = frozenset()
) -> dict[str, object]:
    path = tmp_path / "camera.toml"
    path.write_text(inspect.cleandoc(text) + "\n")
    return read_param_file(path, params, overridden=overridden)


def test_values_are_converted_by_the_annotations(tmp_path: Path) -> None:
    values = read(
        tmp_path,
        """
        # one camera
        source = "rtsp://192.0.2.10/stream"
        threshold = 1          # an integer for a float
        input-size = "960"     # dashes, and a string goes through the command line's conversion
        realtime = true
        size = "large"
        model = "models/face.onnx"
        """,
    )
    assert values == {
        "source": "rtsp://192.0.2.10/stream",
        "threshold": 1.0,
        "input_size": 960,
        "realtime": True,
        "size": "large",
        "model": Path("models/face.onnx"),
    }
    assert type(values["threshold"]) is float
    assert read(tmp_path, "model = 'none'") == {"model": None}
    assert read(tmp_path, "") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('source = "x"\ntreshold = 0.5', r"camera\.toml:2: unknown parameter 'treshold'; did you mean 'threshold'\? "
         r"\(parameters: input_size, model, output, realtime, size, source, threshold\)"),
        ("input_size = 2.5", r"camera\.toml:1: input_size: expected an integer, got 2\.5$"),
        ("input_size = true", r"camera\.toml:1: input_size: expected an integer, got true$"),
        ("input_size = 'big'", r"camera\.toml:1: input_size: expected an integer, got 'big'$"),
        ("input_size = 8", r"camera\.toml:1: input_size: expected a number in \[32, 4096\], got 8$"),
        ("source = 5", r"camera\.toml:1: source: expected a string \(in quotes\), got 5$"),
        ("realtime = 'maybe'", r"camera\.toml:1: realtime: expected true or false, got 'maybe'$"),
        ("size = 'huge'", r"camera\.toml:1: size: expected one of 'small', 'large', got 'huge'$"),
        ("threshold = [1, 2]", r"camera\.toml:1: threshold: expected a number, got an array$"),
        ("output = '/nonexistent/out.mp4'", r"camera\.toml:1: output: expected a file path in an existing folder"),
        ("source = 'x'\n\n[pipeline]\nsource = 'y'", r"camera\.toml:3: \[pipeline\] is a table; parameters are "
         r"top-level `name = value` lines"),
        ("input_size = 64\ninput-size = 64", r"camera\.toml:2: input_size is given twice \('input_size' and "
         r"'input-size'\)"),
        ("threshold = .5", r"camera\.toml:1: not valid TOML: Invalid value at column 13: threshold = \.5$"),
        ('source = "unterminated', r"camera\.toml:1: not valid TOML: .* at column \d+: source = \"unterminated$"),
    ],
)  # fmt: skip
def test_a_wrong_file_names_the_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        read(tmp_path, text)


def test_a_missing_or_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match=re.escape(f"{tmp_path / 'no.toml'}: no such parameter file")):
        read_param_file(tmp_path / "no.toml", PARAMS)
    with pytest.raises(ParameterError, match=re.escape(f"{tmp_path}: is a folder")):
        read_param_file(tmp_path, PARAMS)
    (tmp_path / "bin.toml").write_bytes(b"source = '\xff'\n")
    with pytest.raises(
        ParameterError, match=re.escape(f"{tmp_path / 'bin.toml'}: the parameter file cannot be read")
    ):
        read_param_file(tmp_path / "bin.toml", PARAMS)


def test_an_overridden_value_is_typed_but_not_range_checked(tmp_path: Path) -> None:
    # A camera's file names /data; a machine without /data overrides it on the command line.
    text = "output = '/nonexistent/out.mp4'\ninput_size = 8"
    assert read(tmp_path, text, overridden=frozenset({"output", "input_size"})) == {
        "output": "/nonexistent/out.mp4",
        "input_size": 8,
    }
    with pytest.raises(ParameterError, match="input_size: expected an integer"):
        read(tmp_path, "input_size = 'big'", overridden=frozenset({"input_size"}))


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "params.toml"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    with pytest.raises(ParameterError, match=r"params\.toml: is a FIFO \(named pipe\), not a parameter file"):
        read_param_file(fifo, [])
