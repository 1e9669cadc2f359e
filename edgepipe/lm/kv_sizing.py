"""A decoder's KV cache in numbers: its layout settled, its length, its name and bytes in the
memory plan. The runner allocates what these say, and a plan made before the run
(:mod:`edgepipe.lm.reservations`) reserves the same, without a session.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from edgepipe.infer.footprint import device_label
from edgepipe.lm.errors import DecoderLayoutError
from edgepipe.lm.layout import DecoderLayout, check_config, shares_buffer
from edgepipe.planning.memory import MemoryPlan, Reservation

log = logging.getLogger(__name__)

STEP_WIDTH = 8
"""The most tokens one row feeds in a batched step (a verify step of 7 drafts and the last)."""

DEFAULT_MAX_SEQ_LEN = 4096
"""The longest cache made unless asked for more: a model's own context may be 128k positions."""


def model_files(model: Path) -> tuple[Path, Path]:
    """(folder, .onnx file) of a model given as a folder with ``model.onnx`` or as the file."""
    return (model, model / "model.onnx") if model.is_dir() else (model.parent, model)


def settle_layout(
    layout: DecoderLayout, file: Path, folder: Path, model: str
) -> tuple[DecoderLayout, dict[str, Any]]:
    """The layout as the runner uses it, and the model's merged config (see
    :func:`~edgepipe.lm.layout.check_config`): a concat model whose attention writes into its
    past buffer is run as ``shared``, on a buffer of the length the runner chooses."""
    config = check_config(layout, folder, model)
    if layout.cache == "concat" and shares_buffer(file, config):
        layout = dataclasses.replace(layout, cache="shared")
    return layout, config


def cache_length(
    layout: DecoderLayout, config: dict[str, Any], max_seq_len: int | None, model: str
) -> tuple[int, int]:
    """(positions a request may fill, positions the cache buffers are made for). Raises
    :class:`DecoderLayoutError` for a ``max_seq_len`` past a fixed buffer's length."""
    default_len = min(int(config.get("max_position_embeddings", 2048)), DEFAULT_MAX_SEQ_LEN)
    if layout.cache == "shared" and layout.model_max_seq is not None:
        if max_seq_len is not None and max_seq_len > layout.model_max_seq:
            raise DecoderLayoutError(
                f"max_seq_len={max_seq_len} is longer than the model's cache buffer "
                f"({layout.model_max_seq} positions)",
                model=model,
            )
        return max_seq_len or layout.model_max_seq, layout.model_max_seq  # the graph fixes the buffer
    length = max_seq_len or default_len
    return length, length


def cache_copies(layout: DecoderLayout, slots: int) -> int:
    """How many ``slots``-wide buffers of one layer's keys (or values) the runner holds: one for
    the shared layout; two used in turn for concat, plus a one-slot pair where a joining
    request's prompt runs while the others decode (several slots) — counted in slot widths."""
    if layout.cache == "shared":
        return slots
    return 2 * slots + (2 if slots > 1 else 0)


def kv_cache_size(layout: DecoderLayout, length: int, slots: int = 1) -> tuple[str, int]:
    """What the cache of ``slots`` requests of ``length`` positions is called in the memory plan,
    and its bytes (in the type the model declares, named unless float32; every buffer of the
    concat layout)."""
    width = f"{slots} slots x {length}" if slots > 1 else f"{length}"
    kind = "" if layout.kv_dtype == "float32" else f", {layout.kv_dtype}"
    what = f"KV cache ({layout.cache}, {width} positions{kind})"
    return what, layout.kv_bytes(length, cache_copies(layout, slots))


def reserve_kv_cache(
    plan: MemoryPlan, owner: str, layout: DecoderLayout, length: int, device: tuple[str, int], slots: int = 1
) -> Reservation:
    """Reserve the cache in ``plan``: against the budget on the host, named only on a device
    (whose memory the budget does not cover). Raises
    :class:`~edgepipe.planning.memory.MemoryBudgetError` naming it when it does not fit."""
    what, nbytes = kv_cache_size(layout, length, slots)
    hint = "pass a smaller max_seq_len" + (" or fewer slots" if slots > 1 else "")
    return plan.reserve(owner, what, nbytes, hint=hint, device=device_label(device))


def usable_slots(layout: DecoderLayout, slots: int, on_host: bool, name: str = "") -> int:
    """The slots a runner of this model can hold: one where the model's batch is fixed at 1, or
    where a concat cache lives on a device (its rows are moved on the host). ``name``: said in
    a log line when fewer than asked."""
    if slots > 1 and layout.batch_fixed:
        if name:
            log.info("model %s: its batch is fixed at 1, so it decodes one request at a time "
                     "(slots=1, not %d)", name, slots)  # fmt: skip
        return 1
    if slots > 1 and layout.cache == "concat" and not on_host:
        if name:
            log.info("model %s: a concat-layout cache on an accelerator decodes one request at a "
                     "time (slots=1, not %d)", name, slots)  # fmt: skip
        return 1
    return slots
