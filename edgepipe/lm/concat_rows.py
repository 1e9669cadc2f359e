"""The concat layout's batch: which slot is in which row, the common cache length, the masks.

A concat model reads its past as one [batch, kv_heads, past, head_dim] array and writes a
present ``width`` longer, so every row of a batch shares the cache length. A row shorter than
the longest is padded, and a token a row drops (a rejected draft) or feeds as padding stays in
its row as a masked hole: each row's mask over the cache positions says which it keeps, and the
model takes a key's position from the running count of its row's mask (see
``scripts/tiny_lm.py``), so holes cost room, not correctness.

Rows are moved between the two buffers only when the batch changes: a request that leaves, a
request that joins (its prompt ran on the one-row "solo" pair while the batch decoded), or a
cache full of holes. The move packs each row's kept positions to the front, on the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from edgepipe.lm.errors import ContextOverflow
from edgepipe.lm.kv_cache import KVCache
from edgepipe.lm.kv_sizing import STEP_WIDTH
from edgepipe.lm.layout import DecoderLayout


class Runs(Protocol):
    """What the batch needs of its runner (:class:`~edgepipe.lm.runner.DecoderRunner`)."""

    lengths: list[int]
    layout: DecoderLayout
    session: Any

    def buffers(self, batch: int, width: int, total: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
    def bind_concat(self, batch: int, past: int, width: int, past_ptrs: Any, present_ptrs: Any) -> None: ...
    def run(self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray) -> np.ndarray: ...


class ConcatRows:
    """The batch of a concat-layout runner. Not thread-safe: the runner's thread."""

    def __init__(self, cache: KVCache, buffer_len: int) -> None:
        self.cache = cache
        self.buffer_len = buffer_len
        self.batch: list[int] = []
        """Slots in the order of the batch's rows."""
        self.past = 0
        """The batch's cache length (positions in every row, holes included)."""
        self.keep = np.zeros((cache.slots, buffer_len), np.int64)
        """Per row of the batch: 1 where a position holds one of its tokens."""
        self.solo: int | None = None
        """The slot whose prompt runs on the one-row pair while the batch decodes."""
        self.solo_past = 0
        self._leaving: set[int] = set()
        self._joining = False
        self._positions = np.arange(buffer_len + STEP_WIDTH, dtype=np.int64)

    def _live(self) -> list[int]:
        return [s for s in self.batch if s not in self._leaving]

    def begin(self, slot: int, lengths: Sequence[int]) -> None:
        """A new request on ``slot``: the batch's first row if nothing else runs, else the solo
        (a solo whose prompt is done moves into the batch first)."""
        if slot in self.batch or slot == self.solo:
            self.end(slot)
        if self._joining:
            self._pack(lengths)
        if not self._live() and not self._joining:
            self.batch, self.past = [slot], 0
            self._leaving.clear()
            self.keep[0].fill(0)
            self.cache.reset()
            self.solo = None
            return
        if self.solo is not None:
            raise RuntimeError(f"slot {self.solo} is joining: one request joins at a time")
        self.solo, self.solo_past = slot, 0

    def end(self, slot: int) -> None:
        if slot == self.solo:
            self.solo, self._joining = None, False
        elif slot in self.batch:
            self._leaving.add(slot)
            if not self._live():  # nothing left to keep
                self.batch, self.past = [], 0
                self._leaving.clear()

    def joined(self, slot: int) -> None:
        if slot == self.solo:
            self._joining = True

    def rewind(self, slot: int, count: int) -> None:
        if slot == self.solo:
            raise ValueError("a joining request's prompt cannot be rewound")
        row = self.batch.index(slot)
        kept = np.flatnonzero(self.keep[row, : self.past])
        self.keep[row, kept[-count:]] = 0

    def width_room(self, slots: Sequence[int], lengths: Sequence[int]) -> int:
        if len(slots) == 1 and slots[0] == self.solo:
            return self.buffer_len - self.solo_past
        rows = self._live() + ([self.solo] if self._joining and self.solo is not None else [])
        longest = max(lengths[s] for s in rows) if rows else 0
        return min(STEP_WIDTH, self.buffer_len - longest)  # after packing out the holes, if need be

    def step(
        self,
        runner: Runs,
        slots: Sequence[int],
        tokens: Sequence[Sequence[int] | np.ndarray],
        width: int,
    ) -> list[np.ndarray]:
        if len(slots) == 1 and slots[0] == self.solo:
            return self._solo_step(runner, slots[0], tokens[0])
        if not self.batch and self.solo is None and len(slots) == 1 and runner.lengths[slots[0]] == 0:
            self.begin(slots[0], runner.lengths)  # the one-slot way: feed() with no begin()
        if self._leaving or self._joining:
            self._pack(runner.lengths)
        if self.past + width > self.buffer_len:
            self._pack(runner.lengths)  # squeeze the holes out
        if self.past + width > self.buffer_len:
            raise ContextOverflow(
                f"a step of {width} tokens does not fit a {self.buffer_len}-position cache "
                f"holding {self.past}",
                model=runner.session.name, needed=self.past + width, limit=self.buffer_len,
            )  # fmt: skip
        missing = [s for s in slots if s not in self.batch]
        if missing:
            raise ValueError(f"slots {missing} have no request in the batch")
        batch, past, total = len(self.batch), self.past, self.past + width
        ids, positions, mask = runner.buffers(batch, width, total)
        ids.fill(0)
        keep = self.keep
        keep[:batch, past:total] = 0  # padding is a hole
        for row, slot in enumerate(self.batch):
            length = runner.lengths[slot]
            positions[row] = self._positions[length : length + width]
        rows = []
        for slot, fed in zip(slots, tokens, strict=True):
            row = self.batch.index(slot)
            ids[row, : len(fed)] = fed
            keep[row, past : past + len(fed)] = 1
            rows.append(row)
        np.copyto(mask, keep[:batch, :total])
        cache, layers = self.cache, runner.layout.layers
        pairs = [[cache.past_present(i, k) for k in range(2)] for i in range(layers)]
        runner.bind_concat(batch, past, width, [[p[0] for p in pp] for pp in pairs],
                           [[p[1] for p in pp] for pp in pairs])  # fmt: skip
        logits = runner.run(ids, mask, positions)
        cache.swap()
        self.past = total
        return [logits[row, : len(fed)] for row, fed in zip(rows, tokens, strict=True)]

    def _solo_step(self, runner: Runs, slot: int, fed: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        past, n = self.solo_past, len(fed)
        ids, positions, mask = runner.buffers(1, n, past + n)
        ids[0] = fed
        positions[0] = self._positions[past : past + n]  # no holes: the position is the index
        mask.fill(1)
        cache, layers = self.cache, runner.layout.layers
        pairs = [[cache.solo_past_present(i, k) for k in range(2)] for i in range(layers)]
        runner.bind_concat(
            1, past, n, [[p[0] for p in pp] for pp in pairs], [[p[1] for p in pp] for pp in pairs]
        )
        logits = runner.run(ids, mask, positions)
        cache.swap(solo=True)
        self.solo_past = past + n
        return [logits[0, :n]]

    def _pack(self, lengths: Sequence[int]) -> None:
        """Move the rows that stay (and the one joining) into the other buffer, each row's kept
        positions packed to its front, and make it the past."""
        stay = self._live()
        joining = self.solo if self._joining else None
        rows = stay + ([joining] if joining is not None else [])
        if not rows:
            self.batch, self.past = [], 0
            self._leaving.clear()
            return
        kept = {s: np.flatnonzero(self.keep[self.batch.index(s), : self.past]) for s in stay}
        new_past = max(lengths[s] for s in rows)
        cache, lay = self.cache, self.cache.layout
        heads, dim = lay.kv_heads, lay.head_dim
        old = len(self.batch)
        for i in range(lay.layers):
            for k in range(2):
                past_ptr, present_ptr = cache.past_present(i, k)
                src = cache.host(past_ptr, old * heads * self.past * dim).reshape(old, heads, self.past, dim)
                dst = cache.host(present_ptr, len(rows) * heads * new_past * dim)
                dst = dst.reshape(len(rows), heads, new_past, dim)
                for row, slot in enumerate(rows):
                    n = lengths[slot]
                    if slot == joining:
                        solo_ptr = cache.solo_past_present(i, k)[0]
                        dst[row, :, :n] = cache.host(solo_ptr, heads * n * dim).reshape(heads, n, dim)
                    else:
                        dst[row, :, :n] = src[self.batch.index(slot)][:, kept[slot]]
                    dst[row, :, n:] = 0
        cache.swap()
        self.keep[: len(rows)].fill(0)
        for row, slot in enumerate(rows):
            self.keep[row, : lengths[slot]] = 1
        self.batch, self.past = rows, new_past
        self._leaving.clear()
        if joining is not None:
            self.solo, self._joining = None, False
