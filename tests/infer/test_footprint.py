from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepipe.infer import SessionConfig
from edgepipe.infer.errors import ModelLoadError, ModelNotFound
from edgepipe.infer.footprint import device_label, read_io, read_weights, session_device, weights_bytes
from tests.support.onnx_builders import add_model, save


def test_weights_are_counted_inside_the_file_or_in_its_external_data(tmp_path: Path) -> None:
    import onnx

    inside = add_model(tmp_path / "inside.onnx")
    assert weights_bytes(inside) == 4  # one float32: the file's own bytes are not weights
    model = onnx.load(str(inside))
    outside = tmp_path / "outside.onnx"
    onnx.save_model(model, str(outside), save_as_external_data=True, location="outside.weights",
                    size_threshold=0)  # fmt: skip
    assert weights_bytes(outside) == 4


def _matmul(path: Path, weight: np.ndarray) -> Path:
    """y = x @ W, in W's dtype."""
    elem = helper.np_dtype_to_tensor_dtype(weight.dtype)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", elem, [1, weight.shape[0]])],
        [helper.make_tensor_value_info("y", elem, [1, weight.shape[1]])],
        [numpy_helper.from_array(weight, "W")],
    )  # fmt: skip
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _matmul_nbits(path: Path, bits: int, k: int = 64, n: int = 32, block: int = 32) -> Path:
    """y = x @ dequantized(B), as ONNX Runtime's 4/8-bit MatMulNBits stores B: uint8 bytes."""
    blocks = k // block
    b = numpy_helper.from_array(np.zeros((n, blocks, block * bits // 8), np.uint8), "B")
    scales = numpy_helper.from_array(np.ones(n * blocks, np.float16), "scales")
    node = helper.make_node("MatMulNBits", ["x", "B", "scales"], ["y"], domain="com.microsoft",
                            K=k, N=n, bits=bits, block_size=block)  # fmt: skip
    graph = helper.make_graph(
        [node], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, n])], [b, scales],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return save(helper.make_model(graph, opset_imports=opsets), path)


def test_an_fp16_export_of_the_same_weights_is_half_the_bytes(tmp_path: Path) -> None:
    w = np.random.default_rng(0).standard_normal((96, 48)).astype(np.float32)
    fp32 = read_weights(_matmul(tmp_path / "fp32.onnx", w))
    fp16 = read_weights(_matmul(tmp_path / "fp16.onnx", w.astype(np.float16)))
    assert fp32.params == fp16.params == 96 * 48
    assert (fp32.nbytes, fp16.nbytes) == (96 * 48 * 4, 96 * 48 * 2)
    assert (fp32.dtype, fp16.dtype) == ("fp32", "fp16")


@pytest.mark.parametrize("bits", [4, 8])
def test_a_matmul_nbits_model_counts_its_packed_bytes(tmp_path: Path, bits: int) -> None:
    weights = read_weights(_matmul_nbits(tmp_path / "q.onnx", bits))
    assert weights.params == 64 * 32  # K x N weights
    assert weights.nbytes == 64 * 32 * bits // 8 + 2 * 32 * 2  # packed B, and fp16 scales
    assert weights.dtype == f"int{bits}"


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
