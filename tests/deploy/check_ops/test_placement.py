from __future__ import annotations

from collections import Counter
from pathlib import Path

from edgepipe.deploy.check_ops.check import read_nodes
from edgepipe.deploy.check_ops.placement import CPU, placement


def test_centerface_nodes_are_read_back_from_a_real_session(centerface: Path) -> None:
    placed = placement(centerface, CPU)
    assert placed.confirmed, placed.reason
    _, nodes = read_nodes(centerface)
    assert placed.providers == {CPU: Counter(n.op_type for n in nodes)}
    assert placed.nodes_on(CPU) == len(nodes)
    assert not placed.off_target(CPU)


def test_a_provider_not_installed_or_a_converter_is_not_confirmed(centerface: Path) -> None:
    missing = placement(centerface, "NoSuchExecutionProvider")
    assert not missing.confirmed
    assert "not in this onnxruntime" in missing.reason
    assert not placement(centerface, "").confirmed


def test_a_session_that_fails_says_why(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07:\x02\x0a\x00")  # ir_version 7 and an empty, truncated graph
    placed = placement(bad, CPU)
    assert not placed.confirmed
    assert placed.reason.startswith("the session failed")
