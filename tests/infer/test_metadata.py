"""What a model says of its outputs: the registry's entry for its own models (by checksum), the
file's metadata for any other."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from edgepipe.infer.errors import ModelLoadError
from edgepipe.infer.footprint import read_metadata
from edgepipe.infer.metadata import OutputsInfo, from_metadata, metadata_props, outputs_info
from edgepipe.infer.registry import REGISTRY, ResolvedModel
from tests.support.onnx_builders import add_model


def test_what_edgepipe_writes_it_reads_back_from_the_file(tmp_path: Path) -> None:
    path = add_model(tmp_path / "m.onnx")
    model = onnx.load(str(path))
    onnx.helper.set_model_props(
        model, {"producer_note": "kept", **metadata_props("centerface", ["face"], "x")}
    )
    onnx.save(model, str(path))
    assert read_metadata(path) == {"producer_note": "kept", "edgepipe.adapter": "centerface",
                                   "edgepipe.labels": '["face"]', "edgepipe.source": "x"}  # fmt: skip
    assert outputs_info(ResolvedModel(path, by_path=True)) == OutputsInfo(
        "centerface", ("face",), "its metadata"
    )


def test_a_file_without_them_says_nothing_and_a_registry_model_says_its_entrys(tmp_path: Path) -> None:
    path = add_model(tmp_path / "m.onnx")
    assert outputs_info(ResolvedModel(path, by_path=True)) == OutputsInfo()
    entry = REGISTRY["centerface"]  # its file cannot carry them: its checksum is pinned
    said = outputs_info(ResolvedModel(path, entry, by_path=True))
    assert said == OutputsInfo("centerface", ("face",), "the registry's centerface")


@pytest.mark.parametrize("labels", ["face", '{"0": "face"}', "[1, 2]", '["face"'])
def test_labels_that_are_not_a_json_list_of_names_are_refused(labels: str) -> None:
    with pytest.raises(
        ModelLoadError, match=r"^model m\.onnx: its metadata edgepipe\.labels is .*, not a JSON"
    ):
        from_metadata({"edgepipe.labels": labels}, model="m.onnx")


def test_no_labels_are_not_written() -> None:
    assert metadata_props("yolov8", [], "m.onnx") == {
        "edgepipe.adapter": "yolov8",
        "edgepipe.source": "m.onnx",
    }
    assert from_metadata({"edgepipe.adapter": "yolov8"}, model="m") == OutputsInfo(
        "yolov8", None, "its metadata"
    )
