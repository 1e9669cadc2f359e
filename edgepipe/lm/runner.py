"""A decoder-only model with its KV cache of several slots: batched steps, IO-bound, no copies.

``DecoderRunner(model_dir, slots=N)`` loads ``model.onnx`` (or a given .onnx file) with
:class:`~edgepipe.infer.Session`, reads its layout, allocates the KV cache for ``slots``
requests of ``max_seq_len`` positions once, in the type the model declares, and logs its size.
It keeps the token, position and mask inputs and the logits output in buffers of its own. A
step binds slices of those buffers and runs: nothing is allocated per token in this code, and
ONNX Runtime writes present keys/values and logits where they are bound.

A slot holds one request. :meth:`begin` starts one on a slot, :meth:`step` appends tokens to
any set of slots in one run of the model (each row its own count, padded to the longest; rows
keep their own lengths, masks and positions), :meth:`rewind` drops a slot's last tokens (the
drafts a speculative step rejected), :meth:`end` frees the slot. :meth:`feed` is the one-slot
way: a prompt in chunks of ``prefill_chunk``. Blocking; one step at a time (a worker's thread).

Both cache layouts batch (:mod:`edgepipe.lm.kv_cache`): the shared buffer by per-row sequence
lengths in the attention mask; the concat layout by per-row masks over a common cache length
(rows shorter than the longest are padded, and a dropped token leaves a masked hole), with its
rows moved between buffers only when requests join or leave (:mod:`edgepipe.lm.concat_rows`).
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
from edgepipe.lm.concat_rows import ConcatRows
from edgepipe.lm.errors import ContextOverflow, KVCacheAllocationError, LMError
from edgepipe.lm.kv_cache import KVCache
from edgepipe.lm.kv_sizing import (
    STEP_WIDTH,
    cache_length,
    kv_cache_size,
    model_files,
    reserve_kv_cache,
    settle_layout,
    usable_slots,
)
from edgepipe.lm.layout import DecoderLayout, InputNames, read_layout
from edgepipe.planning.memory import memory_plan

log = logging.getLogger(__name__)

_CPU = "cpu"


class DecoderRunner:
    """Runs one decoder model on one KV cache of ``slots`` requests."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        max_seq_len: int | None = None,
        prefill_chunk: int = 64,
        session: SessionConfig | None = None,
        names: InputNames | None = None,
        owner: str = "",
        slots: int = 1,
    ) -> None:
        """``owner`` names who holds the KV cache in the memory plan (a node id; the model's
        name by default). ``slots``: requests decoded together (1 for a model whose batch is
        fixed at 1, said in one log line)."""
        if slots < 1:
            raise ValueError("slots must be at least 1")
        path = Path(model)
        self.folder, file = model_files(path)
        self.session = Session(file, session or SessionConfig(timeout_s=30.0), name=str(path), owner=owner)
        self.layout, self.config = settle_layout(
            read_layout(self.session, names), file, self.folder, str(path)
        )
        lay = self.layout
        device = self.session.device
        on_host = device[0] == "cpu"
        slots = usable_slots(lay, slots, on_host, path.name)
        self.slots = slots
        self.max_seq_len, buffer_len = cache_length(lay, self.config, max_seq_len, str(path))
        if on_host:
            _check_memory(lay, buffer_len, slots, str(path))
        # In the plan before it exists: a cache that would pass the budget is refused, by name.
        # (The budget is host memory; a cache on an accelerator is named in the plan, outside it.)
        reservation = reserve_kv_cache(memory_plan(), owner or path.name, lay, buffer_len, device, slots)
        try:
            self.cache = KVCache(lay, buffer_len, device=device, slots=slots)
        except Exception as exc:  # ORT's allocation errors have no common base but this
            reservation.release()
            if on_host:
                raise
            raise KVCacheAllocationError(
                f"a KV cache for {slots} x {buffer_len} positions ({reservation.nbytes / 1e9:.2f} GB) "
                f"could not be allocated on {device[0]}:{device[1]}: {exc}; pass a smaller max_seq_len",
                model=str(path),
            ) from exc
        except BaseException:
            reservation.release()
            raise
        weakref.finalize(self.cache, reservation.release)
        self._kv_reservation = reservation
        self.buffer_len = buffer_len
        self.prefill_chunk = max(1, min(prefill_chunk, self.max_seq_len))
        self.lengths = [0] * slots
        """Positions each slot's request has filled."""
        rows = max(self.prefill_chunk, slots * STEP_WIDTH)  # the most (row, position) pairs a step feeds
        self._ids = np.zeros(rows, np.int64)
        self._positions = np.zeros(rows, np.int64)
        self._counting = np.arange(buffer_len + max(STEP_WIDTH, self.prefill_chunk), dtype=np.int64)
        self._mask = np.zeros(slots * buffer_len, np.int64)
        self._logits = np.zeros(rows * lay.vocab, np.float32)
        self._binding = self.session.io_binding()
        self._kv_device, self._kv_device_id = self.cache.device
        self._past = [
            [lay.names.past.format(i=i, kind=k) for k in ("key", "value")] for i in range(lay.layers)
        ]
        self._present = [
            [lay.names.present.format(i=i, kind=k) for k in ("key", "value")] for i in range(lay.layers)
        ]
        self._bound_rows: tuple[int, int] | None = None  # shared layout: the slots the cache is bound for
        self._concat = ConcatRows(self.cache, buffer_len) if lay.cache == "concat" else None
        what, nbytes = kv_cache_size(lay, buffer_len, slots)
        log.info(
            "model %s: %s allocated on %s: %.1f MB (%d layers x 2 x %d kv heads x %d x %d x %d bytes%s)",
            path.name, what, self.cache.device[0], nbytes / 1e6, lay.layers, lay.kv_heads, buffer_len,
            lay.head_dim, lay.kv_itemsize, f" x {slots} slots" if slots > 1 else "",
        )  # fmt: skip

    def _bind(self, name: str, ptr: int, shape: Sequence[int], dtype: Any, *, output: bool) -> None:
        # Token ids, positions, mask and logits live on the host: a few bytes in, rows out.
        bind = self._binding.bind_output if output else self._binding.bind_input
        bind(name, _CPU, 0, dtype, list(shape), ptr)

    def _bind_kv(self, name: str, ptr: int, shape: Sequence[int], *, output: bool) -> None:
        # Keys and values live where the model runs: they never cross to the host.
        bind = self._binding.bind_output if output else self._binding.bind_input
        bind(name, self._kv_device, self._kv_device_id, self.cache.element_type, list(shape), ptr)

    @property
    def vocab(self) -> int:
        return self.layout.vocab

    @property
    def tokens(self) -> int:
        """Positions filled by slot 0's request (the one-slot way)."""
        return self.lengths[0]

    def close(self) -> None:
        """Free the KV cache and let the model go, both out of the memory plan. Blocking; on
        the thread that runs the steps, once none runs (a step writes into the cache)."""
        self._binding = None
        self.cache.close()
        self._kv_reservation.release()
        self.session.close()

    def begin(self, slot: int = 0) -> None:
        """Start a new request on ``slot`` (its cache is reused, not cleared)."""
        self.lengths[slot] = 0
        if self._concat is not None:
            self._concat.begin(slot, self.lengths)

    def end(self, slot: int) -> None:
        """The request on ``slot`` is over: the slot is free for another."""
        self.lengths[slot] = 0
        if self._concat is not None:
            self._concat.end(slot)

    def joined(self, slot: int) -> None:
        """``slot``'s prompt is in: from now on it decodes with the others (the concat layout
        moves it into the batch before the next step)."""
        if self._concat is not None:
            self._concat.joined(slot)

    def reset(self) -> None:
        """Forget slot 0's request (the one-slot way)."""
        self.begin(0)

    def room(self, slot: int = 0) -> int:
        """Positions left for ``slot``'s request."""
        return self.max_seq_len - self.lengths[slot]

    def width_room(self, slots: Sequence[int]) -> int:
        """The most tokens a row may feed in one step with ``slots`` (every row of a batch is
        written to that width)."""
        if self._concat is not None:
            return self._concat.width_room(slots, self.lengths)
        lo, hi = min(slots), max(slots) + 1
        # ONNX Runtime's GroupQueryAttention takes several new tokens per row for one row only.
        widest = STEP_WIDTH if hi - lo == 1 else 1
        return min(widest, self.buffer_len - max(self.lengths[lo:hi]))

    def rewind(self, slot: int, count: int) -> None:
        """Drop ``slot``'s last ``count`` tokens (drafts a verify step rejected)."""
        if not 0 <= count <= self.lengths[slot]:
            raise ValueError(f"cannot drop {count} of {self.lengths[slot]} tokens")
        self.lengths[slot] -= count
        if self._concat is not None and count:
            self._concat.rewind(slot, count)

    def feed(
        self, tokens: Sequence[int] | np.ndarray, cancel: threading.Event | None = None, slot: int = 0
    ) -> np.ndarray:
        """Run ``tokens`` through the model after what ``slot`` has cached; the logits of the
        last one.

        The returned array is a view of the runner's own buffer, valid until the next call.
        Long inputs go in chunks of ``prefill_chunk``; a set ``cancel`` event stops between
        chunks (what was fed stays cached). Raises :class:`ContextOverflow` when they do not fit.
        """
        n = len(tokens)
        if n == 0:
            raise ValueError("feed() needs at least one token")
        if n > self.room(slot):
            raise ContextOverflow(
                f"{n} more tokens do not fit: {self.lengths[slot]} of "
                f"max_seq_len={self.max_seq_len} are used",
                model=self.session.name, needed=self.lengths[slot] + n, limit=self.max_seq_len,
            )  # fmt: skip
        chunk = self.prefill_chunk
        rows: list[np.ndarray] = []
        for start in range(0, n, chunk):
            if cancel is not None and start and cancel.is_set():
                break
            rows = self.step((slot,), (tokens[start : start + chunk],))
        last: np.ndarray = rows[0][-1]
        return last

    def step(self, slots: Sequence[int], tokens: Sequence[Sequence[int] | np.ndarray]) -> list[np.ndarray]:
        """One run of the model: ``slots[j]`` appends ``tokens[j]``; one logits row per token
        fed, per slot ([len(tokens[j]), vocab] views of the runner's buffer, valid until the
        next step). Rows feed up to ``prefill_chunk`` tokens alone, :data:`STEP_WIDTH` with
        others (see :meth:`width_room`)."""
        width = max(len(t) for t in tokens)
        if len(slots) > 1 and width > STEP_WIDTH:
            raise ValueError(f"a batched step feeds at most {STEP_WIDTH} tokens a row")
        if len(slots) > 1 and width > 1 and self._concat is None:
            raise ValueError("a shared-buffer model takes one token a row in a batched step")
        for slot, fed in zip(slots, tokens, strict=True):
            if len(fed) > self.room(slot):
                raise ContextOverflow(
                    f"{len(fed)} more tokens do not fit slot {slot}: {self.lengths[slot]} of "
                    f"max_seq_len={self.max_seq_len} are used",
                    model=self.session.name, needed=self.lengths[slot] + len(fed), limit=self.max_seq_len,
                )  # fmt: skip
        if self._concat is not None:
            rows = self._concat.step(self, slots, tokens, width)
        else:
            rows = self._shared_step(slots, tokens, width)
        for slot, fed in zip(slots, tokens, strict=True):
            self.lengths[slot] += len(fed)
        return rows

    def _shared_step(
        self, slots: Sequence[int], tokens: Sequence[Sequence[int] | np.ndarray], width: int
    ) -> list[np.ndarray]:
        # The run of neighbouring slots from the lowest to the highest: slots between them that
        # feed nothing get padding written past their length (overwritten when they go on).
        lo, hi = min(slots), max(slots) + 1
        batch = hi - lo
        lengths = self.lengths
        if max(lengths[lo:hi]) + width > self.buffer_len:
            raise ContextOverflow(
                f"a step of {width} tokens does not fit slots {lo}..{hi - 1} of a "
                f"{self.buffer_len}-position cache",
                model=self.session.name, needed=max(lengths[lo:hi]) + width, limit=self.buffer_len,
            )  # fmt: skip
        total = max(lengths[lo:hi]) + width
        ids = self._ids[: batch * width].reshape(batch, width)
        positions = self._positions[: batch * width].reshape(batch, width)
        mask = self._mask[: batch * total].reshape(batch, total)
        ids.fill(0)
        mask.fill(0)
        for row in range(batch):
            past = lengths[lo + row]
            positions[row] = self._counting[past : past + width]
            mask[row, : past + width] = 1  # the attention op writes `width` keys from `past` on
        for slot, fed in zip(slots, tokens, strict=True):
            ids[slot - lo, : len(fed)] = fed
        if self._bound_rows != (lo, batch):
            # Bound for as long as the same slots step together: past and present are one buffer.
            for i in range(self.layout.layers):
                for kind in range(2):
                    ptr, shape = self.cache.shared(i, kind, lo, batch)
                    self._bind_kv(self._past[i][kind], ptr, shape, output=False)
                    self._bind_kv(self._present[i][kind], ptr, shape, output=True)
            self._bound_rows = (lo, batch)
        logits = self.run(ids, mask, positions)
        return [logits[slot - lo, : len(fed)] for slot, fed in zip(slots, tokens, strict=True)]

    def run(self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Bind the host inputs (views of the runner's buffers) and the logits, and run (the
        cache is bound by the caller); the logits [batch, width, vocab]."""
        names = self.layout.names
        i64 = np.int64
        batch, width = ids.shape
        self._bind(names.input_ids, ids.ctypes.data, ids.shape, i64, output=False)
        self._bind(names.attention_mask, mask.ctypes.data, mask.shape, i64, output=False)
        if self.layout.has_position_ids:
            self._bind(names.position_ids, positions.ctypes.data, positions.shape, i64, output=False)
        shape = (batch, width, self.layout.vocab)
        self._bind(names.logits, self._logits.ctypes.data, shape, np.float32, output=True)
        self.session.run_bound(self._binding)
        logits: np.ndarray = self._logits[: batch * width * self.layout.vocab].reshape(shape)
        return logits

    def bind_concat(self, batch: int, past: int, width: int, past_ptrs: Any, present_ptrs: Any) -> None:
        """Concat layout: bind every layer's past ([batch, kv_heads, past, head_dim]) and present
        (``past + width`` long) at these addresses (``ptrs[layer][kind]``)."""
        lay = self.layout
        for i in range(lay.layers):
            for kind in range(2):
                self._bind_kv(
                    self._past[i][kind], past_ptrs[i][kind], (batch, lay.kv_heads, past, lay.head_dim),
                    output=False,
                )  # fmt: skip
                self._bind_kv(
                    self._present[i][kind], present_ptrs[i][kind],
                    (batch, lay.kv_heads, past + width, lay.head_dim), output=True,
                )  # fmt: skip

    def buffers(self, batch: int, width: int, total: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Views of the runner's (ids, positions, mask) buffers for a step of ``batch`` rows of
        ``width`` tokens over ``total`` cache positions."""
        return (
            self._ids[: batch * width].reshape(batch, width),
            self._positions[: batch * width].reshape(batch, width),
            self._mask[: batch * total].reshape(batch, total),
        )


def _check_memory(layout: DecoderLayout, length: int, slots: int, model: str) -> None:
    """Refuse a KV cache that cannot fit before trying to allocate it."""
    _, needed = kv_cache_size(layout, length, slots)
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not on Linux: nothing to check against
        return
    if needed > free:
        raise LMError(
            f"a KV cache for {f'{slots} x ' if slots > 1 else ''}{length} positions needs "
            f"{needed / 1e9:.1f} GB and {free / 1e9:.1f} GB is free; pass a smaller max_seq_len"
            + (" or fewer slots" if slots > 1 else ""),
            model=model,
        )
