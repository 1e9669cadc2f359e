"""Operators per provider and fusions from an ONNX Runtime profile (events as it writes them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgepipe.deploy.trace.ort import (
    Profile,
    fusions,
    operator_ms_within,
    operators,
    providers,
    read_profile,
)


def op(name: str, provider: str, dur: int, ts: int = 0) -> dict[str, Any]:
    return {"cat": "Node", "ph": "X", "name": f"{name}_1_kernel_time", "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": {"op_name": name, "provider": provider}}  # fmt: skip


CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"


def test_operators_are_counted_per_provider_slowest_first(tmp_path: Path) -> None:
    events = [op("FusedConv", CPU, 300), op("FusedConv", CPU, 200), op("MatMul", CUDA, 900),
              {"cat": "Session", "ph": "X", "name": "model_run", "ts": 0, "dur": 2000, "args": {}}]  # fmt: skip
    path = tmp_path / "p.json"
    path.write_text(json.dumps(events))
    profile = read_profile("m", path, 123, None)
    assert profile.start_ns == 123
    assert operators(profile) == [
        {"op": "MatMul", "provider": CUDA, "runs": 1, "total_ms": 0.9},
        {"op": "FusedConv", "provider": CPU, "runs": 2, "total_ms": 0.5},
    ]
    assert providers(profile) == {CUDA: 0.9, CPU: 0.5}


def test_a_cnn_on_the_cpu_expects_fused_conv() -> None:
    ran = Profile("cnn", Path("p"), 0, [op("FusedConv", CPU, 1), op("Conv", CPU, 1)], None, {"Conv", "Relu"})
    [check] = fusions(ran)
    assert check["fusion"].endswith("FusedConv")
    assert check["expected"]
    assert check["ok"]
    unfused = Profile("cnn", Path("p"), 0, [op("Conv", CPU, 1), op("Relu", CPU, 1)], None, {"Conv", "Relu"})
    [check] = fusions(unfused)
    assert check["expected"]
    assert check["present"] == []
    assert not check["ok"]


def test_a_decoder_reports_layer_norm_gelu_and_attention() -> None:
    source = {"MatMul", "ReduceMean", "Pow", "Sqrt", "Div", "Erf", "Softmax", "Add"}
    events = [
        op("LayerNormalization", CPU, 1),
        op("MatMul", CPU, 1),
        op("Erf", CPU, 1),
        op("Softmax", CPU, 1),
    ]
    checks = {c["fusion"]: c for c in fusions(Profile("lm", Path("p"), 0, events, None, source))}
    assert checks["layer norm -> LayerNormalization"]["ok"]
    assert not checks["GELU -> Gelu"]["ok"]  # Erf ran unfused
    attention = checks["attention -> Attention/GroupQueryAttention"]
    assert not attention["expected"]
    assert attention["ok"]
    assert "onnxruntime.transformers" in attention["note"]


def test_an_exported_attention_op_must_survive() -> None:
    source = {"GroupQueryAttention", "MatMul", "Softmax"}
    checks = fusions(Profile("lm", Path("p"), 0, [op("MatMul", CPU, 1)], None, source))
    [attention] = [c for c in checks if c["fusion"].startswith("attention")]
    assert attention["expected"]
    assert not attention["ok"]


def rms_norm(path: Path, square: str) -> Path:
    """y = x / sqrt(mean(x^2) + eps) * w, the square spelled ``Pow`` (as torch exports it) or ``Mul``."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from tests.support.onnx_builders import save

    consts = {
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-5, np.float32),
        "w": np.ones(8, np.float32),
    }
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["sq"])
        if square == "Pow"
        else helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["mean"], axes=[-1], keepdims=1),
        helper.make_node("Add", ["mean", "eps"], ["var"]),
        helper.make_node("Sqrt", ["var"], ["root"]),
        helper.make_node("Div", ["x", "root"], ["unit"]),
        helper.make_node("Mul", ["unit", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )  # fmt: skip
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("square", ["Pow", "Mul"])
def test_a_norm_is_expected_fused_only_where_onnx_runtime_fuses_its_spelling(
    tmp_path: Path, square: str
) -> None:
    import numpy as np
    import onnxruntime as ort

    model = rms_norm(tmp_path / f"{square}.onnx", square)
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "ort")
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.ones((1, 4, 8), np.float32)})
    profile = read_profile("rms", Path(session.end_profiling()), 0, model)
    [norm] = [c for c in fusions(profile) if c["fusion"].startswith("layer norm")]
    assert norm["ok"]  # the real runtime did what the check expects of it
    if square == "Pow":
        assert (norm["expected"], norm["present"]) == (True, ["SimplifiedLayerNormalization"])
    else:  # Mul(x, x): no fusion of ONNX Runtime's matches it, at any level
        assert (norm["expected"], norm["present"]) == (False, [])
        assert norm["note"].startswith("its norm squares with Mul(x, x)")


def run_event(ts: int, dur: int) -> dict[str, Any]:
    return {"cat": "Session", "ph": "X", "name": "model_run", "ts": ts, "dur": dur, "args": {}}


def test_a_warm_up_run_still_going_when_counting_starts_is_left_out_whole() -> None:
    # A warm-up run at load, 0-400 us, while the first item came at 100 us; then a run in a call.
    events = [run_event(0, 400), op("Conv", CPU, 90, ts=0), op("Conv", CPU, 290, ts=100),
              run_event(500, 300), op("Conv", CPU, 280, ts=510)]  # fmt: skip
    profile = Profile("cnn", Path("p"), 0, events)
    assert operators(profile, since_ns=100_000) == [
        {"op": "Conv", "provider": CPU, "runs": 1, "total_ms": 0.28}
    ]
    # Of a call from 495 to 820 us, its model's operators took 0.28 ms: never more than the call.
    assert operator_ms_within(profile, [(495_000, 820_000)], slack_ns=0) == 0.28
    assert operator_ms_within(profile, [(600_000, 900_000)], slack_ns=0) == 0.0  # the run is not inside it
