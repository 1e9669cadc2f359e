from __future__ import annotations

import pytest

from edgepipe.infer.providers import (
    CPU,
    PROVIDER_ORDER,
    candidates,
    full_name,
    intra_op_threads,
    memory_device,
    short_name,
)


def test_default_order_follows_preference_not_the_builds_listing() -> None:
    available = ["CPUExecutionProvider", "OpenVINOExecutionProvider", "CUDAExecutionProvider"]
    wanted, missing = candidates(None, available)
    assert wanted == ["CUDAExecutionProvider", "OpenVINOExecutionProvider", CPU]
    assert missing == []
    assert PROVIDER_ORDER[-1] == CPU


def test_requested_providers_the_build_lacks_are_reported_and_cpu_is_the_last_resort() -> None:
    wanted, missing = candidates(["cuda", "openvino"], ["OpenVINOExecutionProvider", CPU])
    assert wanted == ["OpenVINOExecutionProvider", CPU]
    assert missing == ["CUDAExecutionProvider"]


def test_short_and_full_names() -> None:
    assert full_name("TRT") == "TensorrtExecutionProvider"
    assert full_name("MyVendorExecutionProvider") == "MyVendorExecutionProvider"
    assert short_name("CUDAExecutionProvider") == "cuda"


@pytest.mark.parametrize(
    ("cores", "frac", "threads"), [(2, 0.7, 1), (4, 0.7, 2), (8, 0.7, 5), (1, 0.7, 1), (8, 1.0, 8)]
)
def test_threads_leave_the_headroom(cores: int, frac: float, threads: int) -> None:
    assert intra_op_threads(frac, cores=cores) == threads


def test_budget_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="budget_frac"):
        intra_op_threads(0.0)


def test_buffers_kept_between_runs_live_in_the_providers_memory() -> None:
    assert memory_device("CUDAExecutionProvider", {"device_id": "1"}) == ("cuda", 1)
    assert memory_device("TensorrtExecutionProvider", {}) == ("cuda", 0)
    assert memory_device("DmlExecutionProvider") == ("dml", 0)
    for host in (CPU, "OpenVINOExecutionProvider", "CoreMLExecutionProvider", "QNNExecutionProvider"):
        assert memory_device(host, {"device_id": "3"}) == ("cpu", 0)
