"""Tiny decoder folders for the language-model quantize tests: the source, and one whose weights
carry an outlier in every quantization block (perturbed on purpose: 4 bits cannot hold both the
outlier and the rest of its block)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scripts import tiny_lm

CONFIG = tiny_lm.TinyConfig(max_seq_len=64)
OUTLIER_FACTOR = 20.0


def tiny_decoder(folder: Path, seed: int = 0) -> Path:
    """The ~0.4M-parameter gqa model with its tokenizer.json and config.json: the folder."""
    config = tiny_lm.TinyConfig(max_seq_len=CONFIG.max_seq_len, seed=seed)
    return tiny_lm.write(folder, config, "gqa").parent


def with_outliers(source: Path, folder: Path, block: int = 32) -> Path:
    """A copy of ``source`` whose MatMul weights have their first row of every ``block`` rows
    (the quantizer's blocks run down the input dimension) scaled by :data:`OUTLIER_FACTOR`."""
    import shutil

    import onnx
    from onnx import numpy_helper

    shutil.copytree(source, folder)
    model = onnx.load(str(folder / "model.onnx"))
    weights = {n.input[1] for n in model.graph.node if n.op_type == "MatMul"}
    for init in model.graph.initializer:
        if init.name in weights and len(init.dims) == 2:
            w = numpy_helper.to_array(init).copy()
            w[0::block, :] *= np.float32(OUTLIER_FACTOR)
            init.CopyFrom(numpy_helper.from_array(w, init.name))
    onnx.save(model, str(folder / "model.onnx"))
    return folder
