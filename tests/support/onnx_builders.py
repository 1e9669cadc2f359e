"""Small ONNX models built with onnx.helper, for tests whose outputs must be known exactly."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT


def save(model: object, path: Path) -> Path:
    model.ir_version = 8  # type: ignore[attr-defined]
    path.write_bytes(model.SerializeToString())  # type: ignore[attr-defined]
    return path


def add_model(path: Path, shape: Sequence[int | str] = (2, 3)) -> Path:
    """y = x + 1."""
    one = numpy_helper.from_array(np.ones((), np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "add",
        [helper.make_tensor_value_info("x", FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", FLOAT, list(shape))], [one],
    )  # fmt: skip
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def constant_detector(
    path: Path, outputs: dict[str, np.ndarray], size: int = 320, nhwc: bool = False, batch: int = 1
) -> Path:
    """An image input [batch, 3, size, size] (or NHWC) and outputs fixed to ``outputs``.

    The outputs add 0 * mean(image), so they depend on the input as a real model's do and ONNX
    Runtime cannot fold the graph to constants without reading the image.
    """
    shape = [batch, size, size, 3] if nhwc else [batch, 3, size, size]
    nodes = [helper.make_node("ReduceMean", ["images"], ["mean"], keepdims=0),
             helper.make_node("Mul", ["mean", "zero"], ["nothing"])]  # fmt: skip
    inits = [numpy_helper.from_array(np.zeros((), np.float32), "zero")]
    outs = []
    for name, value in outputs.items():
        inits.append(numpy_helper.from_array(value.astype(np.float32), f"{name}_value"))
        nodes.append(helper.make_node("Add", [f"{name}_value", "nothing"], [name]))
        outs.append(helper.make_tensor_value_info(name, FLOAT, list(value.shape)))
    graph = helper.make_graph(nodes, "constant_detector", [helper.make_tensor_value_info("images", FLOAT, shape)],
                              outs, inits)  # fmt: skip
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def slow_when_bright(path: Path, size: int = 64, work: int = 256, iterations_per_level: float = 2.0) -> Path:
    """A YOLOv8-shaped detector whose run time grows with the image's brightness.

    A Loop repeats a ``work`` x ``work`` MatMul ``mean(image) * iterations_per_level`` times: a
    dark frame (mean 0) runs one iteration, a bright one (mean 255) hundreds, which is how a
    test makes one call hang past its deadline while the calls around it finish in time. The
    output is one box [1, 5, 1]: (cx, cy, w, h) = (size/2, size/2, size/4, size/4), score 0.9.
    """
    body = helper.make_graph(
        [helper.make_node("MatMul", ["m_in", "weights"], ["m_mul"]),
         helper.make_node("Tanh", ["m_mul"], ["m_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("m_in", FLOAT, [work, work])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("m_out", FLOAT, [work, work])],
    )  # fmt: skip
    rng = np.random.default_rng(0)
    quarter = size / 4
    box = np.array([[[size / 2], [size / 2], [quarter], [quarter], [0.9]]], np.float32)
    inits = [
        numpy_helper.from_array(
            (rng.standard_normal((work, work)) / np.sqrt(work)).astype(np.float32), "weights"
        ),
        numpy_helper.from_array(np.ones((work, work), np.float32), "start"),
        numpy_helper.from_array(np.array(iterations_per_level, np.float32), "per_level"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(True), "true"),
        numpy_helper.from_array(box, "box"),
        numpy_helper.from_array(np.zeros((), np.float32), "zero"),
    ]
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], keepdims=0),
        helper.make_node("Mul", ["mean", "per_level"], ["scaled"]),
        helper.make_node("Add", ["scaled", "one"], ["trips_f"]),
        helper.make_node("Cast", ["trips_f"], ["trips"], to=TensorProto.INT64),
        helper.make_node("Loop", ["trips", "true", "start"], ["final"], body=body),
        helper.make_node("ReduceMean", ["final"], ["final_mean"], keepdims=0),
        helper.make_node("Mul", ["final_mean", "zero"], ["nothing"]),
        helper.make_node("Add", ["box", "nothing"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes, "slow_when_bright", [helper.make_tensor_value_info("images", FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", FLOAT, [1, 5, 1])], inits,
    )  # fmt: skip
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def unsupported_op(path: Path) -> Path:
    """Abs on bfloat16: a valid ONNX graph that ONNX Runtime's CPU provider has no kernel for."""
    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["y"], name="abs_bf16")], "bf16",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2])],
    )  # fmt: skip
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
