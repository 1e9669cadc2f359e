from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edgepipe.infer.onnxfile import (
    OnnxFormatError,
    external_data,
    free_image_dims,
    graph_io,
    metadata_props,
    with_io_dims,
)
from tests.support.onnx_builders import add_model, constant_detector


def test_reads_declared_inputs_and_outputs(tmp_path: Path) -> None:
    data = add_model(tmp_path / "add.onnx", shape=(2, "n")).read_bytes()
    inputs, outputs = graph_io(data)
    assert [(i.name, i.elem_type, i.dims) for i in inputs] == [("x", 1, (2, "n"))]
    assert [(o.name, o.dims) for o in outputs] == [("y", (2, "n"))]


def test_initializers_listed_as_inputs_are_left_out(tmp_path: Path) -> None:
    import onnx

    model = onnx.load(add_model(tmp_path / "add.onnx"))
    model.graph.input.append(onnx.helper.make_tensor_value_info("one", onnx.TensorProto.FLOAT, []))
    inputs, _ = graph_io(model.SerializeToString())
    assert [i.name for i in inputs] == ["x"]


def test_changed_dims_are_what_onnx_runtime_sees_and_nothing_else_changes(tmp_path: Path) -> None:
    data = add_model(tmp_path / "add.onnx", shape=(2, 3)).read_bytes()
    changed = with_io_dims(data, {"x": ["batch", 3], "y": [None, 3]})
    session = ort.InferenceSession(changed, providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == ["batch", 3]
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x + 1)


def test_free_image_dims_lets_a_fixed_size_detector_take_any_size(tmp_path: Path) -> None:
    data = constant_detector(
        tmp_path / "d.onnx", {"out": np.zeros((1, 4, 5), np.float32)}, size=32
    ).read_bytes()
    with pytest.raises(Exception, match="invalid dimensions"):
        ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
            None, {"images": np.zeros((1, 3, 64, 48), np.float32)}
        )
    freed = free_image_dims(data)
    (image,), _ = graph_io(freed)
    assert image.dims == ("images:N", 3, "images:H", "images:W")
    out = ort.InferenceSession(freed, providers=["CPUExecutionProvider"]).run(
        None, {"images": np.zeros((1, 3, 64, 48), np.float32)}
    )
    assert out[0].shape == (1, 4, 5)


def test_not_a_model_and_unknown_names_are_errors(tmp_path: Path) -> None:
    with pytest.raises(OnnxFormatError):
        graph_io(b"\xff\xff\xff\xff not protobuf")
    with pytest.raises(OnnxFormatError):
        graph_io(add_model(tmp_path / "a.onnx").read_bytes()[:40])  # truncated
    with pytest.raises(KeyError, match="nope"):
        with_io_dims(add_model(tmp_path / "b.onnx").read_bytes(), {"nope": [1]})


def test_external_data_files_are_named(tmp_path: Path) -> None:
    import onnx

    inside = add_model(tmp_path / "inside.onnx")
    assert external_data(inside.read_bytes()) == set()
    outside = tmp_path / "outside.onnx"
    onnx.save_model(onnx.load(str(inside)), str(outside), save_as_external_data=True, location="w.data",
                    size_threshold=0)  # fmt: skip
    assert external_data(outside.read_bytes()) == {"w.data"}


def test_metadata_props_are_read_as_onnx_writes_them(tmp_path: Path) -> None:
    import onnx

    model = onnx.load(add_model(tmp_path / "add.onnx"))
    assert metadata_props(model.SerializeToString()) == {}
    onnx.helper.set_model_props(model, {"edgepipe.labels": '["visage", "\u9854"]', "author": ""})
    assert metadata_props(model.SerializeToString()) == {
        "edgepipe.labels": '["visage", "\u9854"]',
        "author": "",
    }
