from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe.deploy.check_ops.check import check, read_nodes
from edgepipe.deploy.check_ops.tables import find_table
from edgepipe.infer.onnxfile import OnnxFormatError
from tests.deploy.ops_models import neg_between_relus, with_if


def test_reads_opsets_counts_and_the_ops_inside_subgraphs(tmp_path: Path) -> None:
    opsets, nodes = read_nodes(with_if(tmp_path / "if.onnx"))
    assert opsets == {"ai.onnx": 13}
    result = check("if", opsets, nodes, find_table("rknn"))
    by_op = {u.op_type: u for u in result.ops}
    assert set(by_op) == {"ReduceSum", "Greater", "If", "Constant", "TopK", "ReduceMax"}
    assert by_op["TopK"].in_subgraphs == 1
    assert by_op["ReduceSum"].in_subgraphs == 0
    assert by_op["TopK"].opset == 13
    assert [u.op_type for u in result.unsupported] == ["TopK"]
    assert "ArgMax" in by_op["TopK"].advice
    # the If holding it is what leaves the NPU: ReduceSum/Greater stay, cond crosses to the CPU
    assert result.boundaries.to_host == 1
    assert result.boundaries.partitions == 1


def test_each_crossing_between_target_and_fallback_is_counted(tmp_path: Path) -> None:
    opsets, nodes = read_nodes(neg_between_relus(tmp_path / "negs.onnx"))
    result = check("negs", opsets, nodes, find_table("rknn"))
    assert [(u.op_type, u.count, u.supported) for u in result.ops] == [("Neg", 2, False), ("Relu", 2, True)]
    assert result.unsupported_nodes == 2
    b = result.boundaries
    assert (b.to_host, b.to_device, b.partitions) == (2, 1, 2)  # a->neg1, c->neg2; b->relu2
    assert "Mul by -1" in result.unsupported[0].advice
    assert "cut" in result.unsupported[0].fallback
    on_cuda = check("negs", opsets, nodes, find_table("cuda"))
    assert not on_cuda.unsupported


def test_a_provider_fallback_names_the_cpu_provider_or_says_nothing_can_run_it(tmp_path: Path) -> None:
    opsets, nodes = read_nodes(neg_between_relus(tmp_path / "negs.onnx"))
    coreml = check("negs", opsets, nodes, find_table("coreml"))
    assert {u.op_type: u.fallback for u in coreml.unsupported} == {"Neg": "CPUExecutionProvider"}
    cpu = check("negs", opsets, nodes, find_table("cpu"))
    assert not cpu.unsupported


def test_an_empty_file_is_not_an_onnx_model(tmp_path: Path) -> None:
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(OnnxFormatError, match=r"empty file \(0 bytes\)"):
        read_nodes(tmp_path / "empty.onnx")
