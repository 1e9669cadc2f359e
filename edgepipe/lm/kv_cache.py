"""The KV cache of one worker: allocated once, at start-up, and reused by every request.

- ``shared`` layout: one buffer per layer and kind, [1, kv_heads, length, head_dim], bound as
  both the past input and the present output; the model's attention op writes the new keys
  and values in place.
- ``concat`` layout: the model returns a present one step longer than its past, so each layer
  and kind has two flat buffers of the full length used in turn: the past is read from one, the
  present written into the other (IO-bound, so ONNX Runtime writes straight into it), and the
  two swap after the step. Both are contiguous prefixes of their buffer, so nothing is copied.

The whole cache is one ONNX Runtime allocation on the session's device (``("cuda", 0)`` for
CUDA and TensorRT, host memory otherwise), carved by address: on an accelerator the keys and
values never cross to the host, on a CPU the same code binds host memory. Bindings take
addresses, so the runner only ever asks for ``(address, shape)`` pairs.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from edgepipe.lm.layout import DecoderLayout

_F32 = 4  # bytes per cached value


class KVCache:
    """Every key/value buffer of one worker. Not thread-safe: one request at a time."""

    def __init__(self, layout: DecoderLayout, length: int, device: tuple[str, int] = ("cpu", 0)) -> None:
        self.layout = layout
        self.length = length
        self.device = device
        per = layout.kv_heads * length * layout.head_dim
        copies = 1 if layout.cache == "shared" else 2
        self._copies = copies
        self._per = per
        count = layout.layers * 2 * copies * per
        # One allocation for everything: the whole plan is visible in nbytes.
        arena = ort.OrtValue.ortvalue_from_shape_and_type([count], np.float32, device[0], device[1])
        self._arena: ort.OrtValue | None = arena
        if self.on_host:
            # Touched now, so that the pages are resident from start-up (no growth later) and
            # the positions a request has not written read as zeros.
            arena.numpy().fill(0.0)
        base = int(arena.data_ptr())
        stride = per * _F32
        # Addresses worked out once: a step only picks which of the two is the past.
        self._ptrs = [
            [tuple(base + ((i * 2 + k) * copies + c) * stride for c in range(copies)) for k in range(2)]
            for i in range(layout.layers)
        ]
        self._turn = 0  # every layer swaps at every step: one flag for all

    def close(self) -> None:
        """Free the buffers (a worker's :meth:`~edgepipe.lm.LMWorker.close`). Only once no
        step runs: a bound run writes straight into them. Again is harmless."""
        self._arena = None
        self._ptrs = []

    @property
    def closed(self) -> bool:
        return self._arena is None

    @property
    def on_host(self) -> bool:
        return self.device[0] == "cpu"

    @property
    def nbytes(self) -> int:
        return (
            self.layout.layers
            * 2
            * self._copies
            * self.layout.kv_heads
            * self.length
            * self.layout.head_dim
            * _F32
        )

    def shared(self, layer: int, kind: int) -> tuple[int, tuple[int, int, int, int]]:
        """Shared layout: (address, shape) of one layer's key (kind 0) or value (1) buffer."""
        lay = self.layout
        return self._ptrs[layer][kind][0], (1, lay.kv_heads, self.length, lay.head_dim)

    def past_present(self, layer: int, kind: int) -> tuple[int, int]:
        """Concat layout: addresses of (past, present) flat buffers for this step."""
        pair = self._ptrs[layer][kind]
        return (pair[0], pair[1]) if self._turn == 0 else (pair[1], pair[0])

    def swap(self) -> None:
        """Concat layout: the present just written becomes the next step's past."""
        self._turn ^= 1

    def past_view(self, layer: int, kind: int, tokens: int) -> np.ndarray:
        """The cached keys or values of the first ``tokens`` positions (for tests and tools): a
        view on the host, a copy from a device."""
        lay = self.layout
        if self._arena is None:
            raise ValueError("the KV cache was closed")
        flat = self._arena.numpy()  # a view of host memory; from a device, a copy of it all
        per = self._per
        copy = 0 if lay.cache == "shared" else self._turn
        start = ((layer * 2 + kind) * self._copies + copy) * per
        if lay.cache == "shared":
            full = flat[start : start + per].reshape(1, lay.kv_heads, self.length, lay.head_dim)
            view: np.ndarray = full[:, :, :tokens]
            return view
        view = flat[start : start + lay.kv_heads * tokens * lay.head_dim].reshape(
            1, lay.kv_heads, tokens, lay.head_dim
        )
        return view

    def reset(self) -> None:
        """Start over: the concat buffers' turn goes back to the first (the contents need no
        clearing: a request only ever reads positions it has written)."""
        self._turn = 0
