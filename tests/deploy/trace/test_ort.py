"""Operators per provider and fusions from an ONNX Runtime profile (events as it writes them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgepipe.deploy.trace.ort import Profile, fusions, operators, providers, read_profile


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
    source = {"MatMul", "ReduceMean", "Sqrt", "Div", "Erf", "Softmax", "Add"}
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
