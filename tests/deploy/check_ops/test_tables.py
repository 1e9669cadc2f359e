from __future__ import annotations

import pytest

from edgepipe.deploy.check_ops.tables import UnknownTarget, covers, find_table, tables

TARGETS = {"cpu", "cuda", "tensorrt", "openvino", "qnn", "coreml", "rknn"}


def test_every_target_of_the_issue_has_a_table_naming_its_source_and_version() -> None:
    found = tables()
    assert set(found) >= TARGETS
    for table in found.values():
        assert table.source, table.target
        assert table.version, table.target
        assert table.kind in ("provider", "converter")
        assert table.ops.get("ai.onnx"), table.target
        for domain, ops in table.ops.items():
            for op, spec in ops.items():
                assert spec == "*" or covers(spec, 10**6) or any(covers(spec, v) for v in range(1, 30)), (
                    table.target,
                    domain,
                    op,
                    spec,
                )


@pytest.mark.parametrize(
    ("spec", "inside", "outside"),
    [
        ("13+", [13, 24], [12]),
        ("7-12", [7, 12], [6, 13]),
        ("1-10,13+", [1, 10, 13], [11, 12]),
        ("9", [9], [8, 10]),
    ],
)
def test_covers(spec: str, inside: list[int], outside: list[int]) -> None:
    assert all(covers(spec, v) for v in inside)
    assert not any(covers(spec, v) for v in outside)


def test_lookup_reads_opset_ranges_and_the_table_bounds() -> None:
    cpu = find_table("cpu")
    assert cpu.lookup("", "Conv", 9) == (True, "")
    supported, why = cpu.lookup("", "Conv", 0)
    assert not supported
    assert "not at 0" in why
    assert cpu.lookup("", "NoSuchOp", 17)[0] is False
    assert cpu.lookup("", "Constant", 17)[0]  # folded when the model loads: no kernel needed
    trt = find_table("tensorrt")
    assert trt.lookup("", "Conv", 17)[0]
    assert "below 9" in trt.lookup("", "Conv", 7)[1]
    rknn = find_table("rknn")
    assert rknn.lookup("", "Neg", 17)[0] is False
    assert rknn.lookup("", "Resize", 17) == (True, "mode nearest or bilinear")


def test_unknown_target_suggests_the_nearest() -> None:
    with pytest.raises(UnknownTarget, match="did you mean 'tensorrt'"):
        find_table("tensort")
    assert find_table("RKNN").target == "rknn"
