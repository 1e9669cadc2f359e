from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path

import pytest

from edgepipe.deploy.check_ops.check import read_nodes
from tests.deploy.ops_models import neg_between_relus
from tests.support.cli_process import Command, in_process

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def check_ops(capsys: pytest.CaptureFixture[str]) -> Command:
    """``edgepipe check-ops ARGS``, run in this process (it starts nothing: no child needed)."""
    return functools.partial(in_process, capsys, "check-ops")


def test_an_op_the_target_lacks_is_exit_1_named_with_advice_and_cost(
    check_ops: Command, tmp_path: Path
) -> None:
    model = neg_between_relus(tmp_path / "negs.onnx")
    done = check_ops(model, "--target", "rknn")
    assert done.returncode == 1, done.stderr
    assert "unsupported on rknn:" in done.stdout
    assert "Neg x2: not in the rknn table" in done.stdout
    assert "do: rewrite as Mul by -1" in done.stdout
    assert "cut into 2 NPU part(s)" in done.stdout
    assert "2 tensor(s) device->host and 1 host->device" in done.stdout
    assert "1 of 2 operators (2 of 4 nodes) NOT supported on rknn" in done.stdout


def test_json_lists_the_unsupported_ops_and_the_boundaries(check_ops: Command, tmp_path: Path) -> None:
    model = neg_between_relus(tmp_path / "negs.onnx")
    done = check_ops(model, "--target", "qnn", "--format", "json")
    assert done.returncode == 0, done.stderr  # QNN EP lists Neg
    done = check_ops(model, "--target", "rknn", "--format", "json")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert data["unsupported"] == ["Neg"]
    assert data["unsupported_nodes"] == 2
    assert data["boundaries"] == {"to_host": 2, "to_device": 1, "partitions": 2}
    assert data["target"]["source"].startswith("airockchip/rknn-toolkit2")


def test_centerface_on_cpu_is_exit_0_with_counts_and_placement_from_a_session(
    check_ops: Command, centerface: Path
) -> None:
    done = check_ops("centerface", "--target", "cpu")
    assert done.returncode == 0, done.stderr
    _, nodes = read_nodes(centerface)
    counts = Counter(n.op_type for n in nodes)
    for op, count in counts.items():
        assert any(
            line.split()[:1] == [op] and str(count) in line.split() for line in done.stdout.splitlines()
        ), op
    assert f"CPUExecutionProvider: {len(nodes)} nodes" in done.stdout
    assert f"all {len(counts)} operators ({len(nodes)} nodes) supported on cpu" in done.stdout
    data = json.loads(check_ops(centerface, "--target", "cpu", "--format", "json").stdout)
    assert data["placement"]["confirmed"] is True
    assert data["placement"]["providers"] == {"CPUExecutionProvider": dict(counts)}
    assert {o["op_type"]: o["count"] for o in data["ops"]} == dict(counts)
    assert data["opsets"] == {"ai.onnx": 9}


def test_a_folder_with_model_onnx_is_read(check_ops: Command, tmp_path: Path) -> None:
    neg_between_relus(tmp_path / "model.onnx")
    done = check_ops(tmp_path, "--target", "cuda", "--no-session")
    assert done.returncode == 0, done.stderr
    assert "placement" not in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nothere.onnx", "--target", "cpu"], "model nothere.onnx: no such file"),
        (["centerfac", "--target", "cpu"], "did you mean 'centerface'?"),
        (["centerface", "--target", "rknnn"], "did you mean 'rknn'?"),
    ],
)
def test_a_wrong_model_or_target_is_exit_2_in_one_line(
    check_ops: Command, args: list[str], message: str, centerface: Path
) -> None:
    done = check_ops(*args)
    assert done.returncode == 2
    assert done.stderr.startswith("edgepipe: error: ")
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_file_that_is_not_onnx_is_exit_2(check_ops: Command, tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff" * 40)
    done = check_ops(junk, "--target", "cpu")
    assert done.returncode == 2
    assert "not an ONNX model?" in done.stderr


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("hailo", "--target hailo (raspberry-pi-5-hailo-8l, raspberry-pi-5-hailo-8): edgepipe has no operator "
                  "table for a Hailo-8 or Hailo-8L: Hailo's Dataflow Compiler decides what it takes (hailo "
                  "parser onnx MODEL); the host CPU's table is --target cpu; tables: coreml, cpu, cuda, "),
        ("rk3588", "--target rk3588 names a device (rk3588), not a table: its models run on --target rknn or "
                   "--target cpu"),
    ],
)  # fmt: skip
def test_a_device_of_plans_table_is_answered_with_its_tables(
    check_ops: Command, tmp_path: Path, target: str, message: str
) -> None:
    done = check_ops(neg_between_relus(tmp_path / "negs.onnx"), "--target", target)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert message in done.stderr
