"""A detector's part of a memory plan made before anything runs (``edgepipe run --plan``).

What :meth:`Detector.start() <edgepipe.vision.Detector.start>` and its first frames would take,
without loading the model: its weights (as stored, see
:func:`~edgepipe.infer.footprint.weights_bytes`), on the device its session would use, and the
input tensors of each frame size its inputs say they produce (as
:class:`~edgepipe.vision.preprocess.TensorCache` makes them). A registry model not fetched yet
is counted at the registry's size of its file; the run fetches it.
"""

from __future__ import annotations

from pathlib import Path

from edgepipe.infer.config import SessionConfig
from edgepipe.infer.footprint import device_label, session_device, weights_bytes
from edgepipe.infer.registry import ModelEntry, copy_of, is_cached, looks_like_path, lookup, path
from edgepipe.media.frame import FrameSize
from edgepipe.media.tensor import tensors_size
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.memory_plan import PlanNode
from edgepipe.vision.model import read_input
from edgepipe.vision.preprocess import Normalize, input_format, tensor_buffers


def _locate(model: str) -> tuple[Path | None, ModelEntry | None]:
    """The file a detector would load (None: a registry model not fetched yet) and its entry."""
    if looks_like_path(model):
        file = Path(model).expanduser()
        return file, copy_of(file)  # a copy of a registry model loads as the registry's
    entry = lookup(model)
    return (path(entry) if is_cached(entry) else None), entry


def plan_detector(
    plan: MemoryPlan,
    node: PlanNode,
    *,
    model: str,
    session: SessionConfig,
    input_size: int,
    batch_size: int,
    instances: int = 1,
) -> None:
    """Reserve in ``plan`` the weights and input tensors a detector would hold: the weights
    once (its calls in flight share one session), a set of input tensors for each call in
    flight (``instances``) and around them. Raises :class:`~edgepipe.infer.ModelNotFound` for a
    model that is neither a file nor a name."""
    owner = node.node_id
    device = device_label(session_device(session))
    file, entry = _locate(model)
    if file is None:
        assert entry is not None
        plan.reserve(owner, f"model weights ({entry.filename}, not fetched yet: the run fetches it)",
                     entry.size_bytes, device=device)  # fmt: skip
        node.unknown("input tensors", f"their shape is in the model, not fetched yet (edgepipe models "
                                      f"pull {entry.name})")  # fmt: skip
        return
    plan.reserve(owner, f"model weights ({file.name})", weights_bytes(file), device=device,
                 hint="use a smaller model")  # fmt: skip
    free = session.free_image_dims or (entry is not None and entry.free_image_dims)
    layout, fixed, dtype = read_input(file, free)
    sizes = sorted({size for size in node.inputs.values() if isinstance(size, FrameSize)})
    if not sizes and fixed is not None:
        sizes = [FrameSize(*fixed[::-1])]  # the model's own size, whatever the frames'
    if not sizes:
        node.unknown("input tensors", "their size follows the frames', which no input says")
        return
    buffers = tensor_buffers(batch_size, instances)
    # One set of tensors per frame size, as TensorCache keeps one preprocessor per frame size.
    for size in sizes:
        fmt = input_format(layout, fixed, dtype, Normalize(), input_size=input_size, width=size.width,
                           height=size.height)  # fmt: skip
        what, nbytes = tensors_size(fmt, buffers)
        plan.reserve(owner, what, nbytes, hint="pass a smaller input_size")
