from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from edgepipe.infer import SessionConfig
from edgepipe.infer.errors import ModelLoadError, ModelNotFound
from edgepipe.infer.footprint import device_label, read_io, session_device, weights_bytes
from tests.onnx_builders import add_model


def test_weights_are_the_file_and_its_external_data(tmp_path: Path) -> None:
    import onnx

    inside = add_model(tmp_path / "inside.onnx")
    assert weights_bytes(inside) == inside.stat().st_size
    model = onnx.load(str(inside))
    outside = tmp_path / "outside.onnx"
    onnx.save_model(model, str(outside), save_as_external_data=True, location="outside.weights",
                    size_threshold=0)  # fmt: skip
    data = tmp_path / "outside.weights"
    assert weights_bytes(outside) == outside.stat().st_size + data.stat().st_size


def test_the_declared_inputs_are_read_without_a_session(tmp_path: Path) -> None:
    inputs, outputs = read_io(add_model(tmp_path / "add.onnx", shape=(1, "n")))
    assert [(i.name, i.dims) for i in inputs] == [("x", (1, "n"))]
    assert [o.name for o in outputs] == ["y"]
    with pytest.raises(ModelNotFound, match="no such file"):
        read_io(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff" * 64)
    with pytest.raises(ModelLoadError, match="not a readable ONNX model"):
        read_io(junk)


def test_the_device_is_the_first_providers_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    assert session_device(SessionConfig(providers=("cpu",))) == ("cpu", 0)
    monkeypatch.setattr(
        ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    assert session_device(SessionConfig()) == ("cuda", 0)
    assert session_device(SessionConfig(provider_options={"cuda": {"device_id": "1"}})) == ("cuda", 1)
    assert session_device(SessionConfig(providers=("openvino", "cpu"))) == ("cpu", 0)  # not in this build
    assert device_label(("cuda", 1)) == "cuda:1"
    assert device_label(("cpu", 0)) == ""
