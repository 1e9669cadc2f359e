"""A decoder-only model with its KV cache: prefill and decode steps, IO-bound, no copies.

``DecoderRunner(model_dir)`` loads ``model.onnx`` (or a given .onnx file) with
:class:`~edgepipe.infer.Session`, reads its layout, allocates the KV cache at ``max_seq_len``
once and logs its size, and keeps the token, position and mask inputs and the logits output in
buffers of its own. A step binds slices of those buffers and runs: nothing is allocated per
token in this code, and ONNX Runtime writes present keys/values and logits where they are
bound. Blocking; one request at a time per runner (a worker).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgepipe.infer.session import Session, SessionConfig
from edgepipe.lm.errors import ContextOverflow, KVCacheAllocationError, LMError
from edgepipe.lm.kv_cache import KVCache
from edgepipe.lm.kv_sizing import cache_length, kv_cache_size, model_files, reserve_kv_cache, settle_layout
from edgepipe.lm.layout import DecoderLayout, InputNames, read_layout
from edgepipe.planning.memory import memory_plan

log = logging.getLogger(__name__)

_CPU = "cpu"


class DecoderRunner:
    """Runs one decoder model on one KV cache."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        max_seq_len: int | None = None,
        prefill_chunk: int = 64,
        session: SessionConfig | None = None,
        names: InputNames | None = None,
        owner: str = "",
    ) -> None:
        """``owner`` names who holds the KV cache in the memory plan (a node id; the model's
        name by default)."""
        path = Path(model)
        self.folder, file = model_files(path)
        self.session = Session(file, session or SessionConfig(timeout_s=30.0), name=str(path), owner=owner)
        self.layout, self.config = settle_layout(
            read_layout(self.session, names), file, self.folder, str(path)
        )
        lay = self.layout
        self.max_seq_len, buffer_len = cache_length(lay, self.config, max_seq_len, str(path))
        device = self.session.device
        on_host = device[0] == "cpu"
        if on_host:
            _check_memory(lay, buffer_len, str(path))
        # In the plan before it exists: a cache that would pass the budget is refused, by name.
        # (The budget is host memory; a cache on an accelerator is named in the plan, outside it.)
        reservation = reserve_kv_cache(memory_plan(), owner or path.name, lay, buffer_len, device)
        try:
            self.cache = KVCache(lay, buffer_len, device=device)
        except Exception as exc:  # ORT's allocation errors have no common base but this
            reservation.release()
            if on_host:
                raise
            raise KVCacheAllocationError(
                f"a KV cache for {buffer_len} positions ({reservation.nbytes / 1e9:.2f} GB) could "
                f"not be allocated on {device[0]}:{device[1]}: {exc}; pass a smaller max_seq_len",
                model=str(path),
            ) from exc
        except BaseException:
            reservation.release()
            raise
        weakref.finalize(self.cache, reservation.release)
        self._kv_reservation = reservation
        self.prefill_chunk = max(1, min(prefill_chunk, self.max_seq_len))
        self.tokens = 0
        """Positions filled in the cache by the current request."""
        self._ids = np.zeros((1, self.max_seq_len), np.int64)
        self._positions = np.arange(self.max_seq_len, dtype=np.int64).reshape(1, -1)
        self._mask = np.ones((1, self.max_seq_len), np.int64)
        self._logits = np.zeros((1, self.prefill_chunk, lay.vocab), np.float32)
        self._binding = self.session.io_binding()
        self._kv_device, self._kv_device_id = self.cache.device
        self._past = [
            [lay.names.past.format(i=i, kind=k) for k in ("key", "value")] for i in range(lay.layers)
        ]
        self._present = [
            [lay.names.present.format(i=i, kind=k) for k in ("key", "value")] for i in range(lay.layers)
        ]
        if lay.cache == "shared":
            # Bound once for good: the same buffer is past and present at every step.
            for i in range(lay.layers):
                for kind in range(2):
                    ptr, shape = self.cache.shared(i, kind)
                    self._bind_kv(self._past[i][kind], ptr, shape, output=False)
                    self._bind_kv(self._present[i][kind], ptr, shape, output=True)
        log.info(
            "model %s: %s KV cache for %d tokens allocated on %s: %.1f MB (%d layers x 2 x %d kv heads "
            "x %d x %d x 4 bytes)", path.name, lay.cache, buffer_len, self.cache.device[0],
            self.cache.nbytes / 1e6, lay.layers, lay.kv_heads, buffer_len, lay.head_dim,
        )  # fmt: skip

    def _bind(self, name: str, ptr: int, shape: Sequence[int], dtype: Any, *, output: bool) -> None:
        # Token ids, positions, mask and logits live on the host: a few bytes in, one row out.
        bind = self._binding.bind_output if output else self._binding.bind_input
        bind(name, _CPU, 0, dtype, list(shape), ptr)

    def _bind_kv(self, name: str, ptr: int, shape: Sequence[int], *, output: bool) -> None:
        # Keys and values live where the model runs: they never cross to the host.
        bind = self._binding.bind_output if output else self._binding.bind_input
        bind(name, self._kv_device, self._kv_device_id, np.float32, list(shape), ptr)

    @property
    def vocab(self) -> int:
        return self.layout.vocab

    def close(self) -> None:
        """Free the KV cache and let the model go, both out of the memory plan. Blocking; on
        the thread that runs the steps, once none runs (a step writes into the cache)."""
        self._binding = None
        self.cache.close()
        self._kv_reservation.release()
        self.session.close()

    def reset(self) -> None:
        """Forget the current request (the cache is reused, not cleared)."""
        self.tokens = 0
        self.cache.reset()

    def room(self) -> int:
        """Positions left in the cache."""
        return self.max_seq_len - self.tokens

    def feed(self, tokens: Sequence[int] | np.ndarray, cancel: threading.Event | None = None) -> np.ndarray:
        """Run ``tokens`` through the model after what is cached; the logits of the last one.

        The returned array is a view of the runner's own buffer, valid until the next call.
        Long inputs go in chunks of ``prefill_chunk``; a set ``cancel`` event stops between
        chunks (what was fed stays cached). Raises :class:`ContextOverflow` when they do not fit.
        """
        n = len(tokens)
        if n == 0:
            raise ValueError("feed() needs at least one token")
        if n > self.room():
            raise ContextOverflow(
                f"{n} more tokens do not fit: {self.tokens} of max_seq_len={self.max_seq_len} are used",
                model=self.session.name, needed=self.tokens + n, limit=self.max_seq_len,
            )  # fmt: skip
        chunk = self.prefill_chunk
        last = 0
        for start in range(0, n, chunk):
            if cancel is not None and start and cancel.is_set():
                break
            last = min(chunk, n - start)
            self._ids[0, :last] = tokens[start : start + last]
            self._step(last)
        row: np.ndarray = self._logits[0, last - 1]
        return row

    def _step(self, count: int) -> None:
        lay = self.layout
        past = self.tokens
        total = past + count
        names = lay.names
        i64 = np.int64
        self._bind(names.input_ids, self._ids.ctypes.data, (1, count), i64, output=False)
        self._bind(names.attention_mask, self._mask.ctypes.data, (1, total), i64, output=False)
        if lay.has_position_ids:
            self._bind(
                names.position_ids, self._positions.ctypes.data + past * 8, (1, count), i64, output=False
            )
        self._bind(names.logits, self._logits.ctypes.data, (1, count, lay.vocab), np.float32, output=True)
        if lay.cache == "concat":
            for i in range(lay.layers):
                for kind in range(2):
                    past_ptr, present_ptr = self.cache.past_present(i, kind)
                    past_shape = (1, lay.kv_heads, past, lay.head_dim)
                    present_shape = (1, lay.kv_heads, total, lay.head_dim)
                    self._bind_kv(self._past[i][kind], past_ptr, past_shape, output=False)
                    self._bind_kv(self._present[i][kind], present_ptr, present_shape, output=True)
        self.session.run_bound(self._binding)
        if lay.cache == "concat":
            self.cache.swap()
        self.tokens = total


def _check_memory(layout: DecoderLayout, length: int, model: str) -> None:
    """Refuse a KV cache that cannot fit before trying to allocate it."""
    _, needed = kv_cache_size(layout, length)
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not on Linux: nothing to check against
        return
    if needed > free:
        raise LMError(
            f"a KV cache for {length} positions needs {needed / 1e9:.1f} GB and {free / 1e9:.1f} GB is free; "
            "pass a smaller max_seq_len",
            model=model,
        )
