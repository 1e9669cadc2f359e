from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

from edgepipe.deploy.quantize.model import (
    ModelChoiceError,
    default_output,
    excluded_nodes,
    find_model,
    head_nodes,
    prepare,
)
from tests.support.onnx_builders import add_model


def test_a_folder_gives_its_model_onnx_or_its_only_onnx(tmp_path: Path) -> None:
    one = tmp_path / "one"
    one.mkdir()
    add_model(one / "detector.onnx")
    assert find_model(str(one)).path == one / "detector.onnx"
    add_model(one / "other.onnx")
    with pytest.raises(ModelChoiceError, match=r"2 \.onnx files"):
        find_model(str(one))
    add_model(one / "model.onnx")
    assert find_model(str(one)).path == one / "model.onnx"


def test_what_is_not_a_model_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ModelChoiceError, match="no such file"):
        find_model(str(tmp_path / "missing.onnx"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelChoiceError, match=r"not an \.onnx file"):
        find_model(str(tmp_path / "notes.txt"))
    with pytest.raises(ModelChoiceError, match=r"no \.onnx file"):
        find_model(str(tmp_path))


def test_a_registry_name_resolves_to_the_cached_model(centerface: Path, tmp_path: Path) -> None:
    source = find_model("centerface")
    assert source.path == centerface
    assert source.free_image_dims
    assert default_output(source, tmp_path) == tmp_path / "centerface.int8.onnx"
    assert default_output(find_model(str(centerface)), tmp_path) == centerface.with_name(
        "centerface.int8.onnx"
    )


def test_prepare_names_nodes_frees_dims_and_raises_the_opset(centerface: Path, tmp_path: Path) -> None:
    model = prepare(find_model("centerface"), tmp_path / "fp32.onnx", per_channel=True)
    assert all(node.name for node in model.graph.node)
    assert len({node.name for node in model.graph.node}) == len(model.graph.node)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 13
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param != "" for d in dims] == [True, False, True, True]  # N, 3, H, W
    weights = {i.name for i in model.graph.initializer}
    assert not weights & {i.name for i in model.graph.input}
    assert "BatchNormalization" not in {n.op_type for n in model.graph.node}  # folded
    assert onnx.load(str(tmp_path / "fp32.onnx")).graph.node[0].name == model.graph.node[0].name
    assert len(head_nodes(model)) == 4


def test_exclusions_by_node_name_or_operator_type(tmp_path: Path) -> None:
    shutil.copy(add_model(tmp_path / "add.onnx"), tmp_path / "b.onnx")
    model = prepare(find_model(str(tmp_path / "add.onnx")), tmp_path / "p.onnx", per_channel=False)
    (name,) = [n.name for n in model.graph.node]
    assert excluded_nodes(model, ["Add"]) == [name]
    assert excluded_nodes(model, [name, "Add"]) == [name]
    with pytest.raises(ModelChoiceError, match="Softmax: neither a node nor an operator"):
        excluded_nodes(model, ["Softmax"])
