from __future__ import annotations

from edgepipe.infer.providers import (
    CPU,
    PROVIDER_ORDER,
    candidates,
    full_name,
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


def test_buffers_kept_between_runs_live_in_the_providers_memory() -> None:
    assert memory_device("CUDAExecutionProvider", {"device_id": "1"}) == ("cuda", 1)
    assert memory_device("TensorrtExecutionProvider", {}) == ("cuda", 0)
    assert memory_device("DmlExecutionProvider") == ("dml", 0)
    for host in (CPU, "OpenVINOExecutionProvider", "CoreMLExecutionProvider", "QNNExecutionProvider"):
        assert memory_device(host, {"device_id": "3"}) == ("cpu", 0)
