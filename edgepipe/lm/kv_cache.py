"""The KV cache of one worker: allocated once, at start-up, for every slot, and reused.

A slot holds one request's keys and values. The cache is kept in the type the model declares
for its past and present (float32, float16, bfloat16).

- ``shared`` layout: per layer and kind one buffer [slots, kv_heads, length, head_dim], bound
  as both the past input and the present output; the model's attention op writes the new keys
  and values in place. A slot's row is contiguous, so any run of neighbouring slots binds as
  one batch, and one slot alone as a batch of one.
- ``concat`` layout: the model returns a present one step longer than its past, so each layer
  and kind has two flat buffers of ``slots`` rows used in turn: the past is read from one, the
  present written into the other (IO-bound, so ONNX Runtime writes straight into it), and the
  two swap after the step. Both are contiguous prefixes of their buffer, so nothing is copied.
  With several slots a third and fourth buffer, one row each, hold a joining request's prompt
  while the batch decodes (the "solo" pair), until it joins the batch.

The whole cache is one ONNX Runtime allocation on the session's device (``("cuda", 0)`` for
CUDA and TensorRT, host memory otherwise), carved by address: on an accelerator the keys and
values never cross to the host, on a CPU the same code binds host memory. Bindings take
addresses, so the runner only ever asks for ``(address, shape)`` pairs.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import onnxruntime as ort

from edgepipe.lm.kv_sizing import cache_copies
from edgepipe.lm.layout import DecoderLayout

_BFLOAT16 = 16  # TensorProto.BFLOAT16: ONNX Runtime takes the number where numpy has no type

ELEMENT_TYPES: dict[str, Any] = {"float32": np.float32, "float16": np.float16, "bfloat16": _BFLOAT16}
"""How a cache type is named to ONNX Runtime when allocating and binding."""

_HOST_VIEWS: dict[str, Any] = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


class KVCache:
    """Every key/value buffer of one worker. Not thread-safe: one step at a time."""

    def __init__(
        self, layout: DecoderLayout, length: int, device: tuple[str, int] = ("cpu", 0), slots: int = 1
    ) -> None:
        self.layout = layout
        self.length = length
        self.device = device
        self.slots = slots
        self.element_type = ELEMENT_TYPES[layout.kv_dtype]
        per = layout.kv_heads * length * layout.head_dim
        self._per = per
        self._width = cache_copies(layout, slots)  # slot-wide rows per layer and kind
        count = layout.layers * 2 * self._width * per
        # One allocation for everything: the whole plan is visible in nbytes.
        arena = ort.OrtValue.ortvalue_from_shape_and_type([count], self.element_type, device[0], device[1])
        self._arena: ort.OrtValue | None = arena
        self._base = int(arena.data_ptr())
        self._item = layout.kv_itemsize
        if self.on_host:
            # Touched now, so that the pages are resident from start-up (no growth later) and
            # the positions a request has not written read as zeros.
            ctypes.memset(self._base, 0, count * self._item)
        self._turn = 0  # every layer swaps at every step: one flag for all
        self._solo_turn = 0

    def _row(self, layer: int, kind: int, row: int) -> int:
        """Address of slot-wide row ``row`` of one layer's keys (kind 0) or values (1)."""
        return self._base + (((layer * 2 + kind) * self._width) + row) * self._per * self._item

    def close(self) -> None:
        """Free the buffers (a worker's :meth:`~edgepipe.lm.LMWorker.close`). Only once no
        step runs: a bound run writes straight into them. Again is harmless."""
        self._arena = None

    @property
    def closed(self) -> bool:
        return self._arena is None

    @property
    def on_host(self) -> bool:
        return self.device[0] == "cpu"

    @property
    def nbytes(self) -> int:
        return self.layout.layers * 2 * self._width * self._per * self._item

    @property
    def slot_bytes(self) -> int:
        """One slot's keys and values in one layer and kind (the bytes a row holds)."""
        return self._per * self._item

    def shared(self, layer: int, kind: int, first: int = 0, count: int = 1) -> tuple[int, tuple[int, ...]]:
        """Shared layout: (address, shape) of slots ``first .. first + count - 1`` of one layer's
        key (kind 0) or value (1) buffer."""
        lay = self.layout
        return self._row(layer, kind, first), (count, lay.kv_heads, self.length, lay.head_dim)

    def past_present(self, layer: int, kind: int) -> tuple[int, int]:
        """Concat layout: addresses of the batch's (past, present) flat buffers for this step."""
        a, b = self._row(layer, kind, 0), self._row(layer, kind, self.slots)
        return (a, b) if self._turn == 0 else (b, a)

    def solo_past_present(self, layer: int, kind: int) -> tuple[int, int]:
        """Concat layout, several slots: (past, present) of the joining request's pair."""
        a, b = self._row(layer, kind, 2 * self.slots), self._row(layer, kind, 2 * self.slots + 1)
        return (a, b) if self._solo_turn == 0 else (b, a)

    def swap(self, solo: bool = False) -> None:
        """Concat layout: the present just written becomes the next step's past."""
        if solo:
            self._solo_turn ^= 1
        else:
            self._turn ^= 1

    def host(self, address: int, elements: int) -> np.ndarray:
        """Host memory at ``address`` as a flat array of the cache's values (bfloat16 as its
        bits, uint16): for moving a request's rows between buffers. Host caches only."""
        if self._arena is None:
            raise ValueError("the KV cache was closed")
        if not self.on_host:
            raise ValueError("the KV cache is on a device: its buffers cannot be viewed here")
        raw = (ctypes.c_char * (elements * self._item)).from_address(address)
        view: np.ndarray = np.frombuffer(memoryview(raw), _HOST_VIEWS[self.layout.kv_dtype])
        return view

    def past_view(self, layer: int, kind: int, tokens: int, slot: int = 0) -> np.ndarray:
        """The cached keys or values of the first ``tokens`` cache positions of ``slot`` (for
        tests and tools; the concat layout: of the batch row ``slot``, with the batch's cache
        length equal to ``tokens``): a view on the host, a copy from a device."""
        lay = self.layout
        if self._arena is None:
            raise ValueError("the KV cache was closed")
        if self.on_host:
            flat = self.host(self._row(layer, kind, 0), self._per * self._width)
        else:  # from a device, a copy of it all
            flat = self._arena.numpy()[
                (layer * 2 + kind) * self._width * self._per : (layer * 2 + kind + 1)
                * self._width
                * self._per
            ]
        if lay.cache == "shared":
            rows = flat[: self._per * self.slots].reshape(self.slots, lay.kv_heads, self.length, lay.head_dim)
            view: np.ndarray = rows[slot : slot + 1, :, :tokens]
            return view
        start = 0 if self._turn == 0 else self.slots * self._per
        size = lay.kv_heads * tokens * lay.head_dim
        return flat[start + slot * size : start + (slot + 1) * size].reshape(
            1, lay.kv_heads, tokens, lay.head_dim
        )

    def reset(self) -> None:
        """Start over: the concat buffers' turn goes back to the first (the contents need no
        clearing: a request only ever reads positions it has written)."""
        self._turn = 0
        self._solo_turn = 0
