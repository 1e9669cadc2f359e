"""Small models for check-ops' tests, built with onnx.helper."""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper

from tests.support.onnx_builders import save

FLOAT = TensorProto.FLOAT


def neg_between_relus(path: Path, opset: int = 17) -> Path:
    """Relu -> Neg -> Relu -> Neg: Neg is the op RKNN-Toolkit2 lists as Not Supported."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu1"),
        helper.make_node("Neg", ["a"], ["b"], name="neg1"),
        helper.make_node("Relu", ["b"], ["c"], name="relu2"),
        helper.make_node("Neg", ["c"], ["y"], name="neg2"),
    ]
    graph = helper.make_graph(
        nodes,
        "negs",
        [helper.make_tensor_value_info("x", FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", FLOAT, [1, 4])],
    )
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)


def with_if(path: Path) -> Path:
    """A main graph whose If has a TopK in one branch (an op in a subgraph only)."""
    k = helper.make_tensor("k", TensorProto.INT64, [1], [1])
    then_graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["kk"], value=k),
            helper.make_node("TopK", ["x", "kk"], ["t", "ti"], axis=1),
        ],
        "then", [], [helper.make_tensor_value_info("t", FLOAT, [1, 1])],
    )  # fmt: skip
    else_graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["m"], axes=[1], keepdims=1)],
        "else", [], [helper.make_tensor_value_info("m", FLOAT, [1, 1])],
    )  # fmt: skip
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph),
    ]
    zero = helper.make_tensor("zero", FLOAT, [], [0.0])
    graph = helper.make_graph(
        nodes, "cond", [helper.make_tensor_value_info("x", FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", FLOAT, [1, 1])], [zero],
    )  # fmt: skip
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
