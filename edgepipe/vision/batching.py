"""Model runs for a detector's input tensors: one at a time, or several of one size in one run.

Frames from several cameras that wait in one inbox (``Detector(batch_size=N)``, see
:mod:`edgepipe.runtime.batched`) are grouped by tensor shape; each group of two or more goes
through the model as one batch when its batch dimension is free, and each image's share of the
outputs is cut back out as a batch of one, so that the adapters see what a single run gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from edgepipe.vision.model import LoadedModel


class BatchRunner:
    """Runs one model on input tensors. Blocking. A batch is copied into a buffer kept per
    input shape and reused by the next batch of that shape."""

    def __init__(
        self, model: LoadedModel, *, batch_size: int = 1, gauges: dict[str, Any] | None = None
    ) -> None:
        """
        batch_size: the usual largest batch (its buffer is made that big from the start).
        gauges: where the size of the latest batch is shown (``batch``).
        """
        self.model = model
        self.batch_size = batch_size
        self._gauges = gauges if gauges is not None else {}
        self._buffers: dict[tuple[int, ...], np.ndarray] = {}

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        """The model's outputs for one input tensor (a batch of one)."""
        session = self.model.session
        outputs: list[np.ndarray] = session.run({session.inputs[0].name: tensor})
        return outputs

    def run_batch(self, tensors: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
        """The outputs for each tensor, in order, each shaped as a batch of one: one run per
        shape when the model takes a batch, one run per tensor otherwise."""
        session = self.model.session
        out: dict[int, list[np.ndarray]] = {}
        groups: dict[tuple[int, ...], list[int]] = {}
        for index, tensor in enumerate(tensors):
            groups.setdefault(tensor.shape, []).append(index)
        for shape, group in groups.items():
            if len(group) == 1 or not self.model.batchable:
                for index in group:
                    out[index] = self.run(tensors[index])
                continue
            buffer = self._buffers.get(shape)
            if buffer is None or len(buffer) < len(group):
                buffer = self._buffers[shape] = np.empty((max(self.batch_size, len(group)), *shape[1:]),
                                                         self.model.dtype)  # fmt: skip
            for i, index in enumerate(group):
                np.copyto(buffer[i], tensors[index][0])
            outputs = session.run({session.inputs[0].name: buffer[: len(group)]})
            self._gauges["batch"] = len(group)
            for i, index in enumerate(group):
                out[index] = self._one_of(outputs, i)
        return [out[index] for index in range(len(tensors))]

    def _one_of(self, outputs: list[np.ndarray], i: int) -> list[np.ndarray]:
        """Image ``i``'s share of a batch's outputs, shaped as a batch of one."""
        mine = []
        for output in outputs:
            if self.model.adapter == "yolo-nms" and output.ndim == 2:  # [N, 7] rows tagged by image
                rows = output[output[:, 0] == i].copy()
                rows[:, 0] = 0
                mine.append(rows)
            else:
                mine.append(output[i : i + 1])
        return mine
