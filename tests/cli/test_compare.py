from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli_process import edgepipe
from tests.support.onnx_builders import save

WEIGHTS = np.random.default_rng(7).standard_normal((8, 4)).astype(np.float32)


def linear_model(path: Path, weights: np.ndarray) -> Path:
    """y = x @ W + 1 for x [N, 8] (N free): a small model with weights to tamper with."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(np.ones(4, np.float32), "b")],
    )
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def compare(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return edgepipe("compare", *args, cwd=cwd)


@pytest.mark.slow
def test_a_copy_with_one_weight_changed_diverges_and_an_identical_copy_does_not(tmp_path: Path) -> None:
    original = linear_model(tmp_path / "a.onnx", WEIGHTS)
    same = linear_model(tmp_path / "same.onnx", WEIGHTS.copy())
    tampered = WEIGHTS.copy()
    tampered[3, 1] += 0.05
    changed = linear_model(tmp_path / "changed.onnx", tampered)

    done = compare(original, same, "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["samples"] == 3
    (y,) = report["outputs"]
    assert (y["name"], y["shape"], y["max_abs"], y["cosine"]) == ("y", [1, 4], 0.0, pytest.approx(1.0))

    done = compare(original, changed, "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    (y,) = json.loads(done.stdout)["outputs"]
    assert y["ok"] is False
    assert 0 < y["max_abs"] <= 0.05 + 1e-6  # x is in [0, 1): the change times one input value
    assert y["outside"] >= 1
    assert "edgepipe: error: the outputs diverge (y)" in done.stderr

    # Loose enough, the same change passes: the tolerances are the verdict's.
    done = compare(original, changed, "--atol", "0.06", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "verdict: the outputs agree" in done.stdout


@pytest.mark.slow
def test_a_provider_this_onnx_runtime_lacks_is_exit_2_naming_those_it_has(tmp_path: Path) -> None:
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this ONNX Runtime has CUDA")
    model = linear_model(tmp_path / "a.onnx", WEIGHTS)
    done = compare(model, "--ep", "cpu", "--ep", "cuda", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("edgepipe: error: --ep cuda: this ONNX Runtime has no CUDAExecutionProvider")
    assert "available here: " in line
    assert "cpu" in line.split("available here: ")[1]


@pytest.mark.slow
def test_one_model_needs_two_providers(tmp_path: Path) -> None:
    model = linear_model(tmp_path / "a.onnx", WEIGHTS)
    done = compare(model, cwd=tmp_path)
    assert done.returncode == 2
    assert "one model needs two providers" in done.stderr


@pytest.mark.slow
def test_frames_of_a_video_feed_both_sides(
    tmp_path: Path, centerface: Path, make_clip: Callable[..., Path]
) -> None:
    clip = make_clip("compare.mp4", width=320, height=192, fps=15, seconds=1)
    done = compare(
        "centerface", centerface, "--input", clip, "--samples", "2", "--format", "json", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["inputs"] == "2 frames of compare.mp4"
    assert [o["shape"] for o in report["outputs"]] == [
        [1, 1, 48, 80],
        [1, 2, 48, 80],
        [1, 2, 48, 80],
        [1, 10, 48, 80],
    ]
    assert all(o["max_abs"] == 0.0 for o in report["outputs"])


def two_outputs(path: Path, plus: str = "plus", zero: str = "zero", *, swapped: bool = False) -> Path:
    """``plus`` = x + 1 and ``zero`` = x * 0 ([N, 8] each), listed the other way round when
    ``swapped``."""
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 8]) for n in (plus, zero)]
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], [plus]), helper.make_node("Mul", ["x", "nil"], [zero])],
        "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        outputs[::-1] if swapped else outputs,
        [numpy_helper.from_array(np.ones((), np.float32), "one"),
         numpy_helper.from_array(np.zeros((), np.float32), "nil")],
    )  # fmt: skip
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.slow
def test_outputs_are_paired_by_name_and_other_names_are_exit_2(tmp_path: Path) -> None:
    a = two_outputs(tmp_path / "a.onnx")
    done = compare(a, two_outputs(tmp_path / "b.onnx", swapped=True), "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert [(o["name"], o["max_abs"]) for o in json.loads(done.stdout)["outputs"]] == [
        ("plus", 0.0),
        ("zero", 0.0),
    ]

    done = compare(a, two_outputs(tmp_path / "c.onnx", zero="nothing"), cwd=tmp_path)
    assert done.returncode == 2, done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith("edgepipe: error: the two models do not give the same outputs")
    assert "A ['plus', 'zero']; B ['plus', 'nothing']" in line


@pytest.mark.slow
def test_a_run_that_fails_on_the_random_shapes_names_them_and_shape(tmp_path: Path) -> None:
    # Reshape to [-1, 7]: a free dim of 64 does not divide; 70 does.
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "to"], ["y"])], "sevens",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([-1, 7], np.int64), "to")],
    )  # fmt: skip
    model = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "r.onnx")
    done = compare(model, model, cwd=tmp_path)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.endswith("(random inputs x 1x64; give --shape [NAME=]DIMS that the model takes)")
    assert compare(model, model, "--shape", "1x70", cwd=tmp_path).returncode == 0


@pytest.mark.slow
def test_a_folder_of_images_feeds_both_sides(tmp_path: Path, centerface: Path) -> None:
    from skimage import data, io

    folder = tmp_path / "pictures"
    folder.mkdir()
    io.imsave(folder / "astronaut.jpg", data.astronaut())
    io.imsave(folder / "coffee.png", data.coffee())
    done = compare("centerface", centerface, "--input", folder, "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["inputs"] == "2 frames of pictures"
