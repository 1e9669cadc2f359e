"""Reference-counted items backed by pooled memory (video frames, tensors).

A :class:`Leased` item holds a slot of a bounded pool; the slot goes back when the last holder
releases it. The runtime does the counting so that node code rarely has to:

- emitting an item hands the emitter's reference on; each consumer's channel gets one;
- a channel that drops an item (``latest``, ``drop_new``, a detached consumer) releases it;
- after a stage or sink call returns, its input item is released, unless the call returned
  that same item (its reference travels on downstream);
- in a stream stage, an input item is released when the next one is asked for, unless it
  was yielded downstream meanwhile.

Code that keeps an item past its call (a tracker holding the previous frame) calls
:meth:`Leased.retain` and later :meth:`Leased.release`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any


class Leased:
    """Base class of pooled items. Starts with one reference, owned by its creator."""

    __slots__ = ("_lock", "_refs")

    def __init__(self) -> None:
        self._refs = 1
        self._lock = threading.Lock()  # releases may come from worker threads

    @property
    def refs(self) -> int:
        """Current number of holders (0 once freed)."""
        return self._refs

    def retain(self, count: int = 1) -> None:
        """Add ``count`` holders. Raises ``RuntimeError`` if the item was already freed."""
        with self._lock:
            if self._refs <= 0:
                raise RuntimeError(f"{type(self).__name__} used after it was released to its pool")
            self._refs += count

    def release(self) -> None:
        """Drop one holder; the last one gives the memory back (:meth:`_free`)."""
        with self._lock:
            if self._refs <= 0:
                return  # released twice: harmless here, and never frees twice
            self._refs -= 1
            free = self._refs == 0
        if free:
            self._free()

    def _free(self) -> None:
        """Give the backing memory back. Subclasses override; called exactly once."""


def hand_on(item: Any, out: Any, emits: bool) -> bool:
    """After a call took ``item`` and returned ``out``: release the item's reference unless it
    travels on as the output (a stage that returned its input). True when ``out`` is to be
    emitted: ``emits`` (the node feeds others) and there is an output."""
    if emits and out is not None:
        if out is not item and isinstance(item, Leased):
            item.release()
        return True
    if isinstance(item, Leased):
        item.release()
    return False


class Batch(Leased):
    """The items of one batched call (:mod:`edgepipe.runtime.batched`). Holds their references:
    an abandoned call (past its deadline) keeps them leased until its thread finishes, as a
    single item would be."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        super().__init__()
        self.items = items

    def _free(self) -> None:
        items, self.items = self.items, []
        for item in items:
            if isinstance(item, Leased):
                item.release()


def release_later(loop: asyncio.AbstractEventLoop, item: Leased) -> Callable[[Any], None]:
    """A done-callback for a worker thread's future: release ``item`` on the loop when the
    thread is finished with it (or at once if the loop is gone)."""

    def done(_: Any) -> None:
        try:
            loop.call_soon_threadsafe(item.release)
        except RuntimeError:  # the loop is gone: nobody is left to use the pool either
            item.release()

    return done
