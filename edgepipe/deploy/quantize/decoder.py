"""Weight-only 4- or 8-bit quantization of a language model's folder, with ONNX Runtime's own
quantizer (``onnxruntime.quantization.matmul_nbits_quantizer``, which needs ``onnx-ir``).

Every ``MatMul`` with a constant weight becomes ``com.microsoft.MatMulNBits``: the weight in
blocks of ``block`` values along its input dimension, each block with its own scale and zero
point (asymmetric), ``bits`` wide; ``accuracy_level`` 4 lets the CPU kernel compute in int8 (the
activations quantized per block on the fly), the fastest on CPUs. The two ends of the model are
the user's choice (``keep``):

- ``lm_head``: the ``MatMul`` whose weight is ``[hidden, vocab]``, the largest of a small model
  and read whole at every token: quantized by default (most of the decode speed-up);
- ``embed``: the ``Gather`` of ``input_ids`` from a ``[vocab, hidden]`` table, which becomes
  ``com.microsoft.GatherBlockQuantized`` when not kept. Kept in float32 by default
  (:data:`KEPT_BY_DEFAULT`): a step reads one row of it, so quantizing it saves size, not time,
  and it costs accuracy (on the 125M bench model, int4: logit cosine 0.954 kept, 0.940 not).
  ONNX Runtime quantizes it in 4 bits only: at 8 bits it stays float32 whatever was asked.

Other ``Gather`` nodes (rotary tables, shapes) are never touched. The quantizer raises a model's
opset to 21 when it writes int4 tensors; ONNX Runtime's contrib ops read them at any opset, so
the source's opset is put back (a model using ``ReduceMean``'s ``axes`` attribute, opset < 18,
would not load at 21).

The new folder holds ``model.onnx`` (weights inside, or in ``model.onnx_data`` past
:data:`EXTERNAL_DATA_BYTES`) and copies of every other file of the source folder except its
``.onnx`` files and their external data (tokenizer, configs, chat template). It is written
beside its destination under a hidden name, then renamed into place: whole or not at all.

Needs the ``onnx`` and ``onnx-ir`` packages (the ``[deploy]`` extra).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgepipe.infer import onnxfile
from edgepipe.infer.errors import InferError
from edgepipe.infer.footprint import read_io, read_weights
from edgepipe.lm.errors import DecoderLayoutError
from edgepipe.lm.layout import DecoderLayout, layout_of

KEEPABLE = ("lm_head", "embed")
"""What ``keep`` may name: the LM head and the token embedding."""
KEPT_BY_DEFAULT = ("embed",)
BITS = (4, 8)
MODEL_FILE = "model.onnx"
EXTERNAL_DATA_FILE = "model.onnx_data"
EXTERNAL_DATA_BYTES = 1_800_000_000
"""Weights past this go to ``model.onnx_data``: one protobuf message cannot pass 2 GB."""
QUANTIZED_OPS = frozenset(
    {
        ("com.microsoft", "MatMulNBits"),
        ("com.microsoft", "GatherBlockQuantized"),
        ("com.microsoft", "DynamicQuantizeMatMul"),
        ("com.microsoft", "MatMulIntegerToFloat"),
        ("", "QuantizeLinear"),
        ("", "DequantizeLinear"),
        ("", "DynamicQuantizeLinear"),
        ("", "MatMulInteger"),
        ("", "QLinearMatMul"),
    }
)
"""Operators that say a model is quantized already (weight-only, QDQ or integer)."""
_INT4_OPSET = 21
_QUANTIZER_LOG = "onnxruntime.quantization.matmul_nbits_quantizer"


class DecoderQuantError(ValueError):
    """The folder or the options cannot be quantized (the message says why and what to do)."""


@dataclass(frozen=True, slots=True)
class QuantSummary:
    """What :func:`quantize_decoder` wrote."""

    source: Path
    output: Path
    bits: int
    block: int
    accuracy_level: int
    matmuls: int
    """``MatMul`` nodes made ``MatMulNBits`` (the LM head among them unless kept)."""
    kept: tuple[str, ...]
    """Of :data:`KEEPABLE`, what stays float32 (asked, or ``embed`` at 8 bits)."""
    weight_bytes: tuple[int, int]
    """(source, output) weights as stored (:func:`edgepipe.infer.footprint.read_weights`)."""
    file_bytes: tuple[int, int]
    """(source, output) bytes of the model's files (``.onnx`` and its external data)."""
    copied: tuple[str, ...] = field(default_factory=tuple)
    """The other files copied beside the new model."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": str(self.source), "output": str(self.output), "bits": self.bits,
            "block": self.block, "accuracy_level": self.accuracy_level, "matmuls": self.matmuls,
            "kept": list(self.kept), "copied": list(self.copied),
            "weight_bytes": {"source": self.weight_bytes[0], "output": self.weight_bytes[1]},
            "file_bytes": {"source": self.file_bytes[0], "output": self.file_bytes[1]},
        }  # fmt: skip


def decoder_layout(folder: Path) -> DecoderLayout:
    """The layout of the decoder in ``folder`` (its ``model.onnx``), read from the file's
    declared inputs and outputs. Raises :class:`DecoderQuantError` for a folder without one, a
    model that is no decoder, or one already quantized."""
    model = folder / MODEL_FILE
    if not model.is_file():
        raise DecoderQuantError(f"{folder}: no {MODEL_FILE} in this folder; give a language model's folder")
    try:
        inputs, outputs = read_io(model)
        layout = layout_of(
            {t.name: tuple(t.dims or ()) for t in inputs},
            {t.name: tuple(t.dims or ()) for t in outputs},
            str(model),
        )
        ops = _ops(model)
    except DecoderLayoutError as exc:
        why = str(exc).removeprefix(f"model {model}: ").split(" (inputs:")[0]
        raise DecoderQuantError(
            f"{folder}: {MODEL_FILE} is {why}; quantize takes a decoder's folder (model.onnx with past "
            "key values, tokenizer.json), or a detector with --calib VIDEO"
        ) from None
    except InferError as exc:
        raise DecoderQuantError(f"{model}: not a readable ONNX model ({exc})") from None
    done = sorted(op for _, op in ops & QUANTIZED_OPS)
    if done:
        raise DecoderQuantError(
            f"{folder}: already quantized (it has {', '.join(done)}); "
            "quantize the float model it was made from"
        )
    return layout


def is_decoder_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a ``model.onnx`` that is a decoder (quantized or not)."""
    try:
        decoder_layout(folder)
    except DecoderQuantError as exc:
        return "already quantized" in str(exc)
    return True


def _ops(model: Path) -> set[tuple[str, str]]:
    with model.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return onnxfile.node_ops(data)  # type: ignore[arg-type]  # an mmap reads as bytes do


def check_options(bits: int, block: int, keep: Sequence[str]) -> None:
    """Raise :class:`DecoderQuantError` for options the quantizer does not take."""
    if bits not in BITS:
        raise DecoderQuantError(f"--bits {bits}: use 4 or 8")
    if block < 16 or block & (block - 1):
        raise DecoderQuantError(f"--block {block}: a power of two, 16 or more (32, 64, 128 ...)")
    unknown = [k for k in keep if k not in KEEPABLE]
    if unknown:
        raise DecoderQuantError(
            f"--keep {','.join(unknown)}: name {', '.join(KEEPABLE)} or both (comma-separated), or none"
        )


def quantize_decoder(
    src_folder: Path,
    dst_folder: Path,
    bits: int = 4,
    block: int = 32,
    accuracy_level: int = 4,
    keep: Sequence[str] = KEPT_BY_DEFAULT,
    *,
    force: bool = False,
) -> QuantSummary:
    """Write the weight-only quantized copy of the decoder in ``src_folder`` to ``dst_folder``
    (see the module docstring). Blocking; minutes for a large model. Raises
    :class:`DecoderQuantError` for an input or options it cannot take (nothing written), and
    OSError where writing fails (nothing left behind). ``force``: replace a ``dst_folder`` that
    holds a model (never another kind of folder)."""
    import onnx

    check_options(bits, block, keep)
    layout = decoder_layout(src_folder)
    check_destination(src_folder, dst_folder, force=force)
    source_file = src_folder / MODEL_FILE
    model = onnx.load(str(source_file))  # its external data too
    for index, node in enumerate(model.graph.node):
        if not node.name:  # the quantizer excludes by name: "" would stand for every unnamed node
            node.name = f"{node.op_type}_{index}"
    embed = _embedding_nodes(model, layout)
    head = _head_nodes(model, layout)
    kept = [k for k in KEEPABLE if k in keep or (k == "embed" and bits != 4 and embed)]
    quantize_embed = "embed" not in kept and bool(embed)
    excluded = [
        n.name for n in model.graph.node if n.op_type == "Gather" and not (quantize_embed and n.name in embed)
    ]
    if "lm_head" in kept:
        excluded += head
    opset = _main_opset(model)
    quantized = _run_quantizer(model, bits, block, accuracy_level, excluded, quantize_embed)
    for entry in quantized.opset_import:
        if entry.domain in ("", "ai.onnx") and opset is not None and entry.version > opset >= 1:
            entry.version = opset  # see the module docstring: the contrib ops read int4 at any opset
    matmuls = sum(1 for n in quantized.graph.node if n.op_type == "MatMulNBits")
    with _writing(dst_folder, force=force) as work:
        copied = _copy_folder_files(src_folder, work)
        _save(quantized, work / MODEL_FILE)
    return QuantSummary(
        source=src_folder, output=dst_folder, bits=bits, block=block, accuracy_level=accuracy_level,
        matmuls=matmuls, kept=tuple(kept),
        weight_bytes=(read_weights(source_file).nbytes, read_weights(dst_folder / MODEL_FILE).nbytes),
        file_bytes=(model_bytes(src_folder), model_bytes(dst_folder)), copied=tuple(copied),
    )  # fmt: skip


def check_destination(src_folder: Path, dst_folder: Path, *, force: bool) -> None:
    """Raise :class:`DecoderQuantError` when ``dst_folder`` cannot take the new model: the
    source itself, a file, a folder with something in it (without ``force``; with it, only a
    model's folder is replaced), or a parent folder that is not there."""
    if dst_folder.exists() and _same(src_folder, dst_folder):
        raise DecoderQuantError(f"-o {dst_folder}: is the source folder; write the quantized model elsewhere")
    if dst_folder.exists() and not dst_folder.is_dir():
        raise DecoderQuantError(f"-o {dst_folder}: is a file; give a folder to write the quantized model in")
    if dst_folder.is_dir() and any(dst_folder.iterdir()):
        if not force:
            raise DecoderQuantError(f"{dst_folder} exists; pass --force to replace it, or -o another folder")
        if not (dst_folder / MODEL_FILE).is_file():
            raise DecoderQuantError(
                f"-o {dst_folder}: a folder with no {MODEL_FILE} in it is never replaced; -o another folder"
            )
    if not dst_folder.parent.is_dir():
        raise DecoderQuantError(
            f"-o {dst_folder}: its folder {dst_folder.parent} does not exist; create it first"
        )


def default_destination(src_folder: Path, bits: int) -> Path:
    """``<folder>-int4`` (or ``-int8``) beside the source folder, named as it was given."""
    base = src_folder if src_folder.name not in ("", ".", "..") else src_folder.resolve()
    return base.with_name(f"{base.name}-int{bits}")


def model_bytes(folder: Path) -> int:
    """Bytes of the folder's ``model.onnx`` and the external data files it names."""
    model = folder / MODEL_FILE
    with model.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        extra = onnxfile.external_data(data)  # type: ignore[arg-type]  # an mmap reads as bytes do
    files = [folder / name for name in extra]
    return model.stat().st_size + sum(f.stat().st_size for f in files if f.is_file())


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _embedding_nodes(model: Any, layout: DecoderLayout) -> list[str]:
    """Gather nodes reading ``input_ids`` from a constant ``[vocab, hidden]`` table."""
    tables = {i.name for i in model.graph.initializer if len(i.dims) == 2 and i.dims[0] == layout.vocab}
    ids = layout.names.input_ids
    gathers = [n for n in model.graph.node if n.op_type == "Gather"]
    return [n.name for n in gathers if n.input[0] in tables and n.input[1] == ids]


def _head_nodes(model: Any, layout: DecoderLayout) -> list[str]:
    """MatMul nodes whose constant weight is ``[hidden, vocab]``: the LM head."""
    heads = {i.name for i in model.graph.initializer if len(i.dims) == 2 and i.dims[1] == layout.vocab}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in heads]


def _main_opset(model: Any) -> int | None:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return max(versions) if versions else None


def _run_quantizer(model: Any, bits: int, block: int, accuracy_level: int, excluded: list[str],
                   embed: bool) -> Any:  # fmt: skip
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    config = DefaultWeightOnlyQuantConfig(
        block_size=block, is_symmetric=False, accuracy_level=accuracy_level or None, bits=bits,
        op_types_to_quantize=("MatMul", "Gather") if embed else ("MatMul",),
        quant_axes=(("MatMul", 0), ("Gather", 1)),
    )  # fmt: skip
    quantizer = MatMulNBitsQuantizer(model, nodes_to_exclude=excluded, algo_config=config)
    # It logs every node at INFO, and warns of the opset it raises (put back by the caller).
    log = logging.getLogger(_QUANTIZER_LOG)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        quantizer.process()
    finally:
        log.setLevel(level)
    return quantizer.model.model


def _copy_folder_files(src_folder: Path, work: Path) -> list[str]:
    """Copy the source folder's files but its models and their data into ``work``."""
    model_data: set[str] = set()
    for onnx_file in src_folder.glob("*.onnx"):
        with onnx_file.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            model_data |= onnxfile.external_data(data)  # type: ignore[arg-type]
    copied = []
    for path in sorted(src_folder.iterdir()):
        if not path.is_file() or path.suffix == ".onnx" or path.name in model_data:
            continue
        if path.name.endswith((".onnx_data", ".onnx.data")):
            continue
        shutil.copy2(path, work / path.name)
        copied.append(path.name)
    return copied


def _save(model: Any, path: Path) -> None:
    import onnx

    weights = sum(len(t.raw_data) for t in model.graph.initializer)
    if weights > EXTERNAL_DATA_BYTES:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=EXTERNAL_DATA_FILE, size_threshold=1024)  # fmt: skip
    else:
        onnx.save_model(model, str(path))


@contextlib.contextmanager
def _writing(dst_folder: Path, *, force: bool) -> Iterator[Path]:
    """A hidden folder beside ``dst_folder`` to write into; renamed into place when the block
    ends, removed when it raises. An old ``dst_folder`` (``force``) goes only once the new one
    is whole."""
    # mkdir, not mkdtemp: the folder gets the umask's mode, as a folder the user made would.
    work = dst_folder.parent / f".{dst_folder.name}.{secrets.token_hex(4)}.part"
    work.mkdir()
    try:
        yield work
        old: Path | None = None
        if dst_folder.exists():
            if dst_folder.is_dir() and not any(dst_folder.iterdir()):
                dst_folder.rmdir()
            else:
                assert force
                old = work.with_suffix(".old")
                dst_folder.rename(old)
        work.rename(dst_folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
