"""Buffers rebuilt during a run, from the memory plan's reservations."""

from __future__ import annotations

from edgepipe.deploy.trace.summary import buffer_uses, model_owners
from edgepipe.deploy.trace.traced import Allocation


def test_a_buffer_reserved_again_after_the_start_is_rebuilt() -> None:
    allocations = [
        Allocation("faces", "model weights (centerface.onnx)", 7, False),
        Allocation("camera", "frame pool (4 x 640x480)", 100, False),
        Allocation("faces", "input tensors (3 x 640x480 float32)", 50, True),  # sized by the first frame
        Allocation("describe", "KV cache (gqa, 64 positions)", 10, False),
        Allocation("describe", "KV cache (gqa, 64 positions)", 10, True),  # rebuilt
    ]
    rows = {(r["owner"], r["buffer"]): r for r in buffer_uses(allocations)}
    assert set(rows) == {("camera", "frame pool"), ("faces", "input tensors"), ("describe", "KV cache")}
    assert rows[("faces", "input tensors")]["rebuilt"] == 0
    assert rows[("camera", "frame pool")]["rebuilt"] == 0
    assert rows[("describe", "KV cache")]["rebuilt"] == 1
    assert model_owners(allocations) == {"centerface.onnx": "faces"}
