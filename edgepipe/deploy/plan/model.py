"""A language model's facts for the capacity plan, read from its ONNX file (``edgepipe plan
--model PATH``), without ONNX Runtime or the ``onnx`` package.

- parameters and weight bytes: :func:`edgepipe.infer.footprint.read_weights`, the one count
  (packed 4- and 8-bit weights as the bytes they take: the bytes are what a token reads);
- the weights' dtype: the type holding most of the parameters (``int4`` for a decoder whose
  MatMuls are packed 4-bit, even where its float32 embedding holds more bytes), with the
  parameters held in each other type;
- layers, KV heads, head dim, cache dtype: the ``past_key_values`` inputs, read as the runner
  reads them (:func:`edgepipe.lm.layout.layout_of`);
- attention heads: ``config.json`` beside the model (checked against the graph by
  :func:`edgepipe.lm.layout.check_config`), when it says.
"""

from __future__ import annotations

from pathlib import Path

from edgepipe.deploy.plan.capacity import ModelFacts
from edgepipe.infer.footprint import read_io, read_weights
from edgepipe.lm.kv_sizing import cache_length, model_files, settle_layout
from edgepipe.lm.layout import file_layout
from edgepipe.planning.weights import DTYPES


def read_model(path: Path) -> ModelFacts:
    """The facts of the model at ``path`` (a folder with ``model.onnx``, or the file). Raises
    :class:`~edgepipe.infer.ModelNotFound`, :class:`~edgepipe.infer.ModelLoadError` or
    :class:`~edgepipe.lm.DecoderLayoutError` (not a decoder with a KV cache) as loading would."""
    folder, file = model_files(path)
    inputs, outputs = read_io(file)  # the errors that name the model when it is missing or broken
    weights = read_weights(file)
    layout = file_layout(inputs, outputs, str(path))
    layout, config = settle_layout(layout, file, folder, str(path))
    dtype = weights.dtype
    past = next(i for i in inputs if i.name == layout.names.past.format(i=0, kind="key"))
    kv_dtype = DTYPES.get(past.elem_type, ("fp32", 4))[0]
    notes = []
    if layout.cache == "concat":
        notes.append(
            "its cache grows by concatenation (no GroupQueryAttention): edgepipe's runner holds two "
            "buffers of the KV cache, used in turn (the memory plan counts both)"
        )
    if dtype not in ("fp32", "fp16", "bf16", "int8", "int4"):
        notes.append(f"most parameters are {dtype}: planned as read")
        dtype = "int8" if dtype.startswith("int") else "fp32"
    heads = config.get("num_attention_heads")
    return ModelFacts(
        source=str(path),
        params=weights.params,
        dtype=dtype,
        weight_bytes=weights.nbytes,
        layers=layout.layers,
        kv_heads=layout.kv_heads,
        head_dim=layout.head_dim,
        heads=heads if isinstance(heads, int) else None,
        kv_dtype=kv_dtype if kv_dtype in ("fp32", "fp16", "bf16", "int8") else "fp16",
        notes=tuple(notes),
        formats=tuple(weights.formats()),
        packed_params=weights.packed_params,
    )


def cache_positions(path: Path, max_seq_len: int | None) -> int:
    """The positions a runner of the model would make its cache for, with ``max_seq_len``
    (None: the runner's default) — the length the memory plan reserves."""
    folder, file = model_files(path)
    inputs, outputs = read_io(file)
    layout = file_layout(inputs, outputs, str(path))
    layout, config = settle_layout(layout, file, folder, str(path))
    return cache_length(layout, config, max_seq_len, str(path))[1]
