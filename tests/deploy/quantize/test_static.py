from pathlib import Path

import pytest

from edgepipe.deploy.quantize.model import SourceModel
from edgepipe.deploy.quantize.static import int8_saturates, keep_outputs_info
from edgepipe.infer.footprint import read_metadata
from edgepipe.infer.registry import REGISTRY
from tests.support.onnx_builders import add_model

ZEN1 = "fpu vme de pse sse4_2 avx avx2 bmi2 sha_ni"
ICELAKE = ZEN1 + " avx512f avx512bw avx512_vnni"
ALDERLAKE = ZEN1 + " avx_vnni"
ARM = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp"


@pytest.mark.parametrize(
    ("flags", "saturates"),
    [(ZEN1, True), (ICELAKE, False), (ALDERLAKE, False), ("fpu sse2 sse4_1", False)],
)
def test_int8_products_saturate_on_x86_with_avx2_and_no_vnni(
    tmp_path: Path, flags: str, saturates: bool
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: X\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert int8_saturates(cpuinfo) is saturates


def test_arm_and_an_unreadable_cpuinfo_do_not_saturate(tmp_path: Path) -> None:
    arm = tmp_path / "cpuinfo"
    arm.write_text(f"processor\t: 0\nFeatures\t: {ARM}\n")
    assert int8_saturates(arm) is False
    assert int8_saturates(tmp_path / "missing") is False


def test_the_int8_model_keeps_its_sources_metadata_and_says_how_its_outputs_are_read(tmp_path: Path) -> None:
    import onnx

    source = add_model(tmp_path / "fp32.onnx")
    model = onnx.load(str(source))
    onnx.helper.set_model_props(model, {"author": "me", "edgepipe.labels": '["old"]'})
    onnx.save(model, str(source))
    int8 = add_model(tmp_path / "int8.onnx")
    keep_outputs_info(int8, SourceModel(source, "fp32.onnx", None), "centerface", ("face",))
    assert read_metadata(int8) == {"author": "me", "edgepipe.labels": '["face"]', "edgepipe.adapter": "centerface",
                                   "edgepipe.source": "fp32.onnx"}  # fmt: skip
    entry = REGISTRY["centerface"]  # a copy of a registry model names the registry's
    keep_outputs_info(int8, SourceModel(source, "mine.onnx", entry), "centerface", ("face",))
    assert read_metadata(int8)["edgepipe.source"] == "centerface"
