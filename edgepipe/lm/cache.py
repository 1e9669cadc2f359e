"""The KV cache of one worker: allocated once, at start-up, and reused by every request.

- ``shared`` layout: one buffer per layer and kind, [1, kv_heads, length, head_dim], bound as
  both the past input and the present output; the model's attention op writes the new keys
  and values in place.
- ``concat`` layout: the model returns a present one step longer than its past, so each layer
  and kind has two flat buffers of the full length used in turn: the past is read from one, the
  present written into the other (IO-bound, so ONNX Runtime writes straight into it), and the
  two swap after the step. Both are contiguous prefixes of their buffer, so nothing is copied.
"""

from __future__ import annotations

import numpy as np

from edgepipe.lm.layout import DecoderLayout


class KVCache:
    """Every key/value buffer of one worker. Not thread-safe: one request at a time."""

    def __init__(self, layout: DecoderLayout, length: int) -> None:
        self.layout = layout
        self.length = length
        per = layout.kv_heads * length * layout.head_dim
        copies = 1 if layout.cache == "shared" else 2
        # One allocation for everything, carved into views: the whole plan is visible in nbytes.
        self._arena = np.zeros(layout.layers * 2 * copies * per, np.float32)
        self._buffers = self._arena.reshape(layout.layers, 2, copies, per)
        # Addresses worked out once: a step only picks which of the two is the past.
        buffers = self._buffers
        self._ptrs = [
            [tuple(int(buffers[i, k, c].ctypes.data) for c in range(copies)) for k in range(2)]
            for i in range(layout.layers)
        ]
        self._turn = 0  # every layer swaps at every step: one flag for all

    @property
    def nbytes(self) -> int:
        return int(self._arena.nbytes)

    def shared(self, layer: int, kind: int) -> np.ndarray:
        """The [1, kv_heads, length, head_dim] buffer of a shared-layout layer (kind 0 key, 1 value)."""
        lay = self.layout
        view: np.ndarray = self._buffers[layer, kind, 0].reshape(1, lay.kv_heads, self.length, lay.head_dim)
        return view

    def past_present(self, layer: int, kind: int) -> tuple[int, int]:
        """Concat layout: addresses of (past, present) flat buffers for this step."""
        pair = self._ptrs[layer][kind]
        return (pair[0], pair[1]) if self._turn == 0 else (pair[1], pair[0])

    def swap(self) -> None:
        """Concat layout: the present just written becomes the next step's past."""
        self._turn ^= 1

    def past_view(self, layer: int, kind: int, tokens: int) -> np.ndarray:
        """The cached keys or values of the first ``tokens`` positions (for tests and tools)."""
        lay = self.layout
        if lay.cache == "shared":
            return self.shared(layer, kind)[:, :, :tokens]
        past = self._buffers[layer, kind, self._turn]
        view: np.ndarray = past[: lay.kv_heads * tokens * lay.head_dim].reshape(
            1, lay.kv_heads, tokens, lay.head_dim
        )
        return view

    def reset(self) -> None:
        """Start over: the concat buffers' turn goes back to the first (the contents need no
        clearing: a request only ever reads positions it has written)."""
        self._turn = 0
