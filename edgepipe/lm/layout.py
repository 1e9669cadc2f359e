"""What a decoder model looks like from its inputs and outputs: layers, heads, cache layout.

Read from the session's declared inputs (``past_key_values.{i}.key`` is [batch, kv_heads,
past, head_dim]) and checked against ``config.json`` when one sits beside the model. Two cache
layouts:

- ``shared``: the model's attention op (``com.microsoft.GroupQueryAttention``) writes the new
  keys and values into a buffer that is both past and present. Told by a fixed past length
  (the buffer's, chosen at export), or, with a symbolic one, by the graph having that op or
  ``genai_config.json`` saying ``past_present_share_buffer`` (onnxruntime-genai's exports: the
  runner then picks the buffer's length, ``max_seq_len``);
- ``concat``: the model concatenates past and new keys into a longer present.
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from edgepipe.infer import onnxfile
from edgepipe.infer.onnxfile import TensorInfo
from edgepipe.infer.session import Session
from edgepipe.lm.errors import DecoderLayoutError
from edgepipe.planning.kv import kv_cache_bytes

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")

Shape = tuple[int | str | None, ...]

KvDtype = Literal["float32", "float16", "bfloat16"]

KV_TYPES: dict[str | int, KvDtype] = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(bfloat16)": "bfloat16",
    1: "float32", 10: "float16", 16: "bfloat16",
}  # fmt: skip
"""A cache type as a session names it, or as the file numbers it -> the name edgepipe uses."""

KV_ITEMSIZE: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True, slots=True)
class InputNames:
    """Names of the model's inputs and outputs (the Optimum defaults; configurable)."""

    input_ids: str = "input_ids"
    attention_mask: str = "attention_mask"
    position_ids: str = "position_ids"
    logits: str = "logits"
    past: str = "past_key_values.{i}.{kind}"
    present: str = "present.{i}.{kind}"


@dataclass(frozen=True, slots=True)
class DecoderLayout:
    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    cache: Literal["shared", "concat"]
    model_max_seq: int | None
    """For the shared layout: the buffer length the model was built for (None: any)."""
    has_position_ids: bool
    names: InputNames
    kv_dtype: KvDtype = "float32"
    """The type the model declares for its past and present keys and values."""
    batch_fixed: bool = False
    """The model's batch dimension is fixed at 1 (one request at a time: one slot)."""

    @property
    def kv_itemsize(self) -> int:
        return KV_ITEMSIZE[self.kv_dtype]

    def kv_bytes(self, max_seq_len: int, slots: int = 1) -> int:
        """One buffer of the KV cache: slots x layers x 2 x kv_heads x max_seq_len x head_dim x
        the cache type's bytes."""
        return kv_cache_bytes(self.layers, self.kv_heads, max_seq_len, self.head_dim, self.kv_itemsize, slots)


def read_layout(session: Session, names: InputNames | None = None) -> DecoderLayout:
    """The decoder layout of ``session``'s model as its inputs say (a symbolic past length reads
    as ``concat``: see :func:`shares_buffer`); :class:`DecoderLayoutError` if it is none."""
    inputs = {spec.name: spec.shape for spec in session.inputs}
    outputs = {spec.name: spec.shape for spec in session.outputs}
    types = {spec.name: spec.type for spec in session.inputs}
    return layout_of(inputs, outputs, session.name, names, types)


def file_layout(
    inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo], model: str, names: InputNames | None = None
) -> DecoderLayout:
    """:func:`layout_of` from the inputs and outputs a file declares (read without a session)."""
    return layout_of(
        {i.name: i.dims or () for i in inputs}, {o.name: o.dims or () for o in outputs}, model, names,
        {i.name: i.elem_type for i in inputs},
    )  # fmt: skip


def layout_of(
    inputs: Mapping[str, Shape],
    outputs: Mapping[str, Shape],
    model: str,
    names: InputNames | None = None,
    types: Mapping[str, str | int] | None = None,
) -> DecoderLayout:
    """The decoder layout of a model whose inputs and outputs have these shapes (by name: as a
    session or the file declares them) and inputs these types (a session's ``tensor(float16)``
    or the file's number; float32 when not given); :class:`DecoderLayoutError` if it is none."""
    names = names or InputNames()
    missing = [n for n in (names.input_ids, names.attention_mask) if n not in inputs]
    if names.logits not in outputs:
        missing.append(f"{names.logits} (output)")
    layers = sorted({int(m.group(1)) for n in inputs if (m := _PAST.match(n))})
    if not layers:
        missing.append("past_key_values.{i}.key / .value")
    if missing:
        raise DecoderLayoutError(
            f"not a decoder with a KV cache: no {', '.join(missing)} "
            f"(inputs: {', '.join(inputs) or 'none'}; outputs: {', '.join(outputs) or 'none'}). "
            "Export it with past key values (Optimum: --task text-generation-with-past), "
            "or name its inputs with InputNames(...)",
            model=model,
        )
    if layers != list(range(len(layers))):
        raise DecoderLayoutError(f"past_key_values layers are not numbered 0..n-1: {layers}", model=model)
    first = inputs[names.past.format(i=0, kind="key")]
    if len(first) != 4 or not isinstance(first[1], int) or not isinstance(first[3], int):
        raise DecoderLayoutError(
            f"past_key_values.0.key has shape {list(first)}; expected [batch, kv_heads, length, head_dim] "
            "with kv_heads and head_dim fixed",
            model=model,
        )
    for i in layers:
        for kind in ("key", "value"):
            if names.present.format(i=i, kind=kind) not in outputs:
                raise DecoderLayoutError(f"no output {names.present.format(i=i, kind=kind)}", model=model)
    vocab = outputs[names.logits][-1] if outputs[names.logits] else None
    if not isinstance(vocab, int):
        raise DecoderLayoutError("the logits output has no fixed vocabulary size", model=model)
    length = first[2]
    declared = (types or {}).get(names.past.format(i=0, kind="key"), 1)
    kv_dtype = KV_TYPES.get(declared)
    if kv_dtype is None:
        raise DecoderLayoutError(
            f"past_key_values.0.key is {declared}: edgepipe keeps KV caches in float32, float16 or "
            "bfloat16 (export the model with one of those cache types)",
            model=model,
        )
    ids = inputs[names.input_ids]
    return DecoderLayout(
        layers=len(layers), kv_heads=first[1], head_dim=first[3], vocab=vocab,
        cache="shared" if isinstance(length, int) else "concat",
        model_max_seq=length if isinstance(length, int) else None,
        has_position_ids=names.position_ids in inputs, names=names, kv_dtype=kv_dtype,
        batch_fixed=first[0] == 1 or (len(ids) > 0 and ids[0] == 1),
    )  # fmt: skip


def check_config(layout: DecoderLayout, folder: Path, model: str) -> dict[str, Any]:
    """``config.json`` (Hugging Face) and ``genai_config.json`` (onnxruntime-genai) beside the
    model, merged into Hugging Face keys and checked against what the graph says."""
    config: dict[str, Any] = {}
    # config.json wins where it and genai_config.json both say; generation_config.json has the
    # final word on end tokens (Llama 3 lists several there).
    for name in ("genai_config.json", "config.json", "generation_config.json"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise DecoderLayoutError(f"{path} is not readable JSON: {exc}", model=model) from exc
        if name == "generation_config.json":
            data = {k: data[k] for k in ("eos_token_id", "bos_token_id") if k in data}
        config.update(_from_genai(data) if name == "genai_config.json" else data)
        for key, value in (("num_hidden_layers", layout.layers), ("num_key_value_heads", layout.kv_heads),
                           ("head_dim", layout.head_dim), ("vocab_size", layout.vocab)):  # fmt: skip
            if key in config and config[key] != value:
                raise DecoderLayoutError(
                    f"{path}: {key}={config[key]} but the graph has {value}", model=model
                )
    return config


def _from_genai(data: dict[str, Any]) -> dict[str, Any]:
    """onnxruntime-genai's ``genai_config.json`` in Hugging Face ``config.json`` terms."""
    model = data.get("model", {})
    decoder = model.get("decoder", {})
    pairs = {
        "num_hidden_layers": decoder.get("num_hidden_layers"),
        "num_key_value_heads": decoder.get("num_key_value_heads"),
        "num_attention_heads": decoder.get("num_attention_heads"),
        "head_dim": decoder.get("head_size"),
        "hidden_size": decoder.get("hidden_size"),
        "vocab_size": model.get("vocab_size"),
        "max_position_embeddings": model.get("context_length"),
        "bos_token_id": model.get("bos_token_id"),
        "eos_token_id": model.get("eos_token_id"),
        "past_present_share_buffer": data.get("search", {}).get("past_present_share_buffer"),
    }
    return {k: v for k, v in pairs.items() if v is not None}


def shares_buffer(model_file: Path, config: dict[str, Any]) -> bool:
    """Whether the model's attention writes into its past buffer: it has
    ``com.microsoft.GroupQueryAttention``, or its genai config says ``past_present_share_buffer``."""
    if config.get("past_present_share_buffer") is True:
        return True
    try:
        with model_file.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            ops = onnxfile.node_ops(data)  # type: ignore[arg-type]  # mmap reads as bytes do
    except (OSError, ValueError):  # unreadable here: the session has loaded it, so concat is safe
        return False
    return ("com.microsoft", "GroupQueryAttention") in ops
