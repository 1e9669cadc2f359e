"""The conventions every deployment command shares."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np
import pytest

from edgepipe.core.install import install_command
from edgepipe.deploy import output


def test_a_missing_package_names_the_extra_to_install() -> None:
    with pytest.raises(output.MissingExtra) as caught:
        output.require("edgepipe_no_such_module", "deploy", "edgepipe quantize")
    message = str(caught.value)
    assert "edgepipe quantize" in message
    assert message.endswith(f"which is not installed: {install_command('deploy')}")
    assert "\n" not in message


def test_an_installed_package_is_returned() -> None:
    assert output.require("json", "deploy", "x") is json


def test_json_takes_numpy_values_and_paths() -> None:
    out = io.StringIO()
    output.print_json({"n": np.float32(0.5), "a": np.arange(3), "p": Path("/x/y")}, out)
    assert json.loads(out.getvalue()) == {"n": 0.5, "a": [0, 1, 2], "p": "/x/y"}


def test_a_table_off_a_terminal_fits_100_columns() -> None:
    out = io.StringIO()
    rows = [("x" * 80, 1.5, "y" * 80)]
    output.console(out).print(output.table("t", ("a", "n", "b"), rows, right=("n",)))
    lines = out.getvalue().splitlines()
    assert lines
    assert max(len(line) for line in lines) <= output.WIDTH
    assert "".join(lines).count("x") == 80  # folded, not cut


def test_progress_draws_nothing_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with output.progress("working", 3) as bar:
        for _ in range(3):
            bar.advance(0)  # type: ignore[arg-type]
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out == ""


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "x", ""])
def test_a_positive_number_refuses_what_is_not(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"expected a positive number, got {text!r}"):
        output.POSITIVE(text)


def test_the_input_side_is_the_detectors_range() -> None:
    side = output.INPUT_SIDE
    assert side("640") == 640
    with pytest.raises(argparse.ArgumentTypeError, match="from 32 to 4096"):
        side("100000")


@pytest.mark.parametrize("value", ["-3e9", "-5", "-0.5", "-.5", "-1E-3", "-inf"])
def test_a_negative_number_is_a_value_in_either_form(value: str) -> None:
    parser = output.numbers_not_options(argparse.ArgumentParser(exit_on_error=False))
    parser.add_argument("--n", type=output.POSITIVE)
    parser.add_argument("-o")
    for argv in (["--n", value], [f"--n={value}"]):
        with pytest.raises(argparse.ArgumentError, match=f"expected a positive number, got {value!r}"):
            parser.parse_args(argv)
    assert parser.parse_args(["--n", "3e9", "-o", "x"]).n == 3e9
    with pytest.raises(SystemExit):
        parser.parse_args(["--n", "1", "-x"])  # an unknown option is still one
