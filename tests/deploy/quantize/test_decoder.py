from __future__ import annotations

import json
import mmap
from pathlib import Path

import pytest

from edgepipe.deploy.quantize.decoder import (
    DecoderQuantError,
    check_destination,
    check_options,
    decoder_layout,
    quantize_decoder,
)
from edgepipe.infer import onnxfile
from edgepipe.infer.footprint import read_weights
from tests.deploy.quantize.lm_models import tiny_decoder
from tests.support.onnx_builders import add_model


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_decoder(tmp_path_factory.mktemp("quantize_decoder") / "tiny")


def ops(folder: Path) -> set[tuple[str, str]]:
    with (folder / "model.onnx").open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return onnxfile.node_ops(data)  # type: ignore[arg-type]


def matmul_bits(folder: Path) -> set[int]:
    with (folder / "model.onnx").open("rb") as f:
        nodes = onnxfile.graph_nodes(f.read())
    return {dict(n.ints)["bits"] for n in nodes if n.op_type == "MatMulNBits"}


@pytest.mark.parametrize("bits", [4, 8])
def test_the_quantized_folder_is_smaller_and_decodes(source: Path, tmp_path: Path, bits: int) -> None:
    from edgepipe.lm.generate import LanguageModel
    from edgepipe.lm.sampling import SamplingParams

    out = tmp_path / "q"
    summary = quantize_decoder(source, out, bits=bits)
    assert summary.matmuls == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer; the LM head
    assert matmul_bits(out) == {bits}
    assert ("", "MatMul") not in ops(out)
    assert summary.kept == ("embed",)  # by default; at 8 bits ONNX Runtime could not anyway
    assert ("com.microsoft", "GatherBlockQuantized") not in ops(out)
    assert summary.copied == ("config.json", "tokenizer.json")
    assert json.loads((out / "config.json").read_text()) == json.loads((source / "config.json").read_text())
    assert summary.weight_bytes == (
        read_weights(source / "model.onnx").nbytes,
        read_weights(out / "model.onnx").nbytes,
    )
    assert summary.weight_bytes[1] < summary.weight_bytes[0] * (0.3 if bits == 4 else 0.4)
    assert summary.file_bytes[1] < summary.file_bytes[0] * (0.3 if bits == 4 else 0.4)
    assert [p.name for p in tmp_path.iterdir()] == ["q"]  # the hidden work folder became it
    lm = LanguageModel(out)
    try:
        tokens = list(lm.tokens(lm.encode("hello"), SamplingParams(max_new_tokens=5, ignore_eos=True)))
    finally:
        lm.close()
    assert len(tokens) == 5


def test_nothing_kept_at_4_bits_quantizes_the_embedding_and_keeps_the_opset(
    source: Path, tmp_path: Path
) -> None:
    import onnx
    import onnxruntime as ort

    summary = quantize_decoder(source, tmp_path / "q", bits=4, keep=())
    assert summary.kept == ()
    assert ("com.microsoft", "GatherBlockQuantized") in ops(tmp_path / "q")
    model = onnx.load(str(tmp_path / "q" / "model.onnx"), load_external_data=False)
    # The quantizer raised it to 21 for the int4 table; ReduceMean's axes attribute needs < 18.
    assert {o.domain: o.version for o in model.opset_import}[""] == 17
    ort.InferenceSession(str(tmp_path / "q" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert summary.weight_bytes[1] < quantize_decoder(source, tmp_path / "e", bits=4).weight_bytes[1]


def test_a_kept_lm_head_stays_a_float_matmul(source: Path, tmp_path: Path) -> None:
    import onnx

    summary = quantize_decoder(source, tmp_path / "q", bits=4, keep=("lm_head", "embed"))
    assert summary.matmuls == 14
    model = onnx.load(str(tmp_path / "q" / "model.onnx"))
    (head,) = [n for n in model.graph.node if n.op_type == "MatMul"]
    assert head.input[1] == "lm_head"
    assert list(head.output) == ["logits"]


def test_an_already_quantized_folder_is_refused(source: Path, tmp_path: Path) -> None:
    quantize_decoder(source, tmp_path / "q", bits=8)
    with pytest.raises(DecoderQuantError, match=r"q: already quantized \(it has MatMulNBits\)"):
        quantize_decoder(tmp_path / "q", tmp_path / "qq")
    assert not (tmp_path / "qq").exists()


def test_a_model_that_is_no_decoder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "add").mkdir()
    add_model(tmp_path / "add" / "model.onnx")
    with pytest.raises(DecoderQuantError) as caught:
        decoder_layout(tmp_path / "add")
    message = str(caught.value)
    assert message.startswith(
        f"{tmp_path / 'add'}: model.onnx is not a decoder with a KV cache: no input_ids"
    )
    assert "\n" not in message
    with pytest.raises(DecoderQuantError, match=r"no model\.onnx in this folder"):
        decoder_layout(tmp_path)


def test_the_destination_is_never_the_source_nor_a_folder_that_holds_something_else(
    source: Path, tmp_path: Path
) -> None:
    with pytest.raises(DecoderQuantError, match="is the source folder"):
        check_destination(source, source, force=True)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    with pytest.raises(DecoderQuantError, match="exists; pass --force"):
        check_destination(source, tmp_path / "notes", force=False)
    with pytest.raises(DecoderQuantError, match=r"a folder with no model\.onnx in it is never replaced"):
        check_destination(source, tmp_path / "notes", force=True)
    with pytest.raises(DecoderQuantError, match="does not exist; create it first"):
        check_destination(source, tmp_path / "missing" / "q", force=False)
    (tmp_path / "empty").mkdir()
    check_destination(source, tmp_path / "empty", force=False)  # an empty folder takes it


def test_force_replaces_a_model_folder_whole(source: Path, tmp_path: Path) -> None:
    quantize_decoder(source, tmp_path / "q", bits=8)
    (tmp_path / "q" / "stale.txt").write_text("from before")
    quantize_decoder(source, tmp_path / "q", bits=4, force=True)
    assert matmul_bits(tmp_path / "q") == {4}
    assert not (tmp_path / "q" / "stale.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["q"]


@pytest.mark.parametrize(
    ("bits", "block", "keep", "message"),
    [
        (3, 32, (), "--bits 3: use 4 or 8"),
        (4, 48, (), "--block 48: a power of two, 16 or more"),
        (4, 8, (), "--block 8: a power of two, 16 or more"),
        (4, 32, ("head",), "--keep head: name lm_head, embed or both"),
    ],
)
def test_options_the_quantizer_does_not_take(
    bits: int, block: int, keep: tuple[str, ...], message: str
) -> None:
    with pytest.raises(DecoderQuantError, match=message):
        check_options(bits, block, keep)
