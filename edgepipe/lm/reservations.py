"""A language model's part of a memory plan made before anything runs (``edgepipe run --plan``).

What a :class:`~edgepipe.lm.DecoderRunner` would hold, without a session: the model's weights
(as stored, see :func:`~edgepipe.infer.footprint.weights_bytes`) and its KV cache, sized
from the shapes the file declares by the functions the runner uses
(:mod:`edgepipe.lm.kv_sizing`), both on the device its session would use (host memory on a CPU;
a cache in CUDA memory is named in the plan, outside the host budget).
"""

from __future__ import annotations

from pathlib import Path

from edgepipe.infer.config import SessionConfig
from edgepipe.infer.footprint import device_label, read_io, session_device, weights_bytes
from edgepipe.lm.kv_sizing import cache_length, model_files, reserve_kv_cache, settle_layout, usable_slots
from edgepipe.lm.layout import InputNames, file_layout
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.memory_plan import PlanNode


def plan_language_model(
    plan: MemoryPlan,
    node: PlanNode,
    *,
    model: Path,
    max_seq_len: int | None,
    session: SessionConfig | None,
    names: InputNames | None = None,
    slots: int = 1,
) -> None:
    """Reserve in ``plan`` the weights and KV cache (of ``slots`` requests, as the runner would
    allow them) a runner of ``model`` would hold. Raises what
    loading would (:class:`~edgepipe.infer.ModelNotFound`, :class:`~edgepipe.lm.DecoderLayoutError`)."""
    folder, file = model_files(model)
    device = session_device(session or SessionConfig())
    inputs, outputs = read_io(file)
    layout = file_layout(inputs, outputs, str(model), names)
    layout, config = settle_layout(layout, file, folder, str(model))
    _, length = cache_length(layout, config, max_seq_len, str(model))
    plan.reserve(node.node_id, f"model weights ({file.name})", weights_bytes(file),
                 device=device_label(device), hint="use a smaller model")  # fmt: skip
    slots = usable_slots(layout, slots, device[0] == "cpu")
    reserve_kv_cache(plan, node.node_id, layout, length, device, slots)
