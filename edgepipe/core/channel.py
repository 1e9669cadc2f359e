"""Bounded channels between nodes.

A channel is a node's inbox: every producer wired to the node puts into it, and the node takes
from it. Its size is fixed and its policy says what a full channel does to a new item:

- ``block``: the producer waits (lossless: files, results).
- ``latest``: the oldest item is dropped to make room (live video: a slow consumer skips frames
  instead of falling behind).
- ``drop_new``: the new item is dropped (keep what is already queued).

Every drop is counted. A dropped :class:`~edgepipe.core.lease.Leased` item (a pooled frame) is
released, so a pool is never starved by a queue. There is no unbounded queue anywhere.

The channel ends when its last producer calls :meth:`Channel.close`: the consumer drains what is
queued, then :meth:`Channel.get` raises :class:`EndOfStream`. A consumer that stops early calls
:meth:`Channel.detach`, after which puts are discarded (and counted) instead of blocking forever.

Not thread-safe: use it from the event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from edgepipe.core.errors import ChannelClosed, EndOfStream
from edgepipe.core.lease import Leased

T = TypeVar("T")


class Policy(enum.StrEnum):
    """What a full channel does with a new item."""

    BLOCK = "block"
    LATEST = "latest"
    DROP_NEW = "drop_new"

    @classmethod
    def parse(cls, value: str | Policy) -> Policy:
        """Accept a policy or its name; raise ``ValueError`` naming the valid ones."""
        if isinstance(value, Policy):
            return value
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(p.value for p in cls)
            raise ValueError(f"unknown channel policy {value!r}; use one of: {names}") from None


@dataclass(frozen=True, slots=True)
class ChannelStats:
    """A snapshot of one channel's counters."""

    name: str
    """The channel's name: the id of the node whose inbox it is."""
    policy: str
    """``block``, ``latest`` or ``drop_new``."""
    size: int
    """Capacity in items."""
    depth: int
    """Items queued when the snapshot was taken."""
    max_depth: int
    """The most items ever queued at once."""
    put: int
    """Items accepted into the channel."""
    got: int
    """Items taken out by the consumer."""
    dropped: int
    """Items dropped by the policy or discarded after detach; each counted once."""


class Channel(Generic[T]):
    """A bounded multi-producer channel with a drop policy. See the module docstring."""

    __slots__ = (
        "_buf",
        "_closed",
        "_detached",
        "_getters",
        "_producers",
        "_putters",
        "dropped",
        "got_count",
        "max_depth",
        "name",
        "policy",
        "put_count",
        "size",
    )

    def __init__(self, name: str, size: int = 8, policy: Policy | str = Policy.BLOCK) -> None:
        if size < 1:
            raise ValueError(f"channel '{name}': size must be at least 1, got {size}")
        self.name = name
        self.policy = Policy.parse(policy)
        self.size = size
        self._buf: deque[T] = deque()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._putters: deque[asyncio.Future[None]] = deque()
        self._producers = 0
        self._closed = False
        self._detached = False
        self.put_count = 0
        self.got_count = 0
        self.dropped = 0
        self.max_depth = 0

    # -- wiring -------------------------------------------------------------------------------

    def add_producer(self) -> None:
        """Register one more producer; the channel ends when each has called :meth:`close`."""
        if self._closed:
            raise ChannelClosed(self.name)
        self._producers += 1

    def close(self) -> None:
        """One producer is done. When the last one is, the consumer drains and then ends."""
        if self._closed:
            return
        self._producers -= 1
        if self._producers <= 0:
            self._closed = True
            self._wake_all(self._getters)

    def detach(self) -> None:
        """The consumer is gone: drop what is queued and discard every later put (counted)."""
        self._detached = True
        self._closed = True
        while self._buf:
            self._drop(self._buf.popleft())
        self._wake_all(self._getters)
        self._wake_all(self._putters)

    @property
    def closed(self) -> bool:
        """True once every producer closed it, or the consumer detached."""
        return self._closed

    @property
    def detached(self) -> bool:
        """True once the consumer detached: puts are discarded."""
        return self._detached

    def __len__(self) -> int:
        return len(self._buf)

    # -- producer side ------------------------------------------------------------------------

    async def put(self, item: T) -> bool:
        """Queue ``item`` by the channel's policy; return False if it (not another) was dropped.

        Blocks only under ``block`` while the channel is full. Raises :class:`ChannelClosed` if
        every producer already closed the channel.
        """
        buf = self._buf
        if self._closed:
            if self._detached:
                self._drop(item)
                return False
            raise ChannelClosed(self.name)
        if len(buf) >= self.size:
            policy = self.policy
            if policy is Policy.LATEST:
                self._drop(buf.popleft())
            elif policy is Policy.DROP_NEW:
                self._drop(item)
                return False
            else:
                while len(buf) >= self.size and not self._detached:
                    await self._wait(self._putters)
                if self._detached:
                    self._drop(item)
                    return False
        buf.append(item)
        self.put_count += 1
        depth = len(buf)
        if depth > self.max_depth:
            self.max_depth = depth
        self._wake_one(self._getters)
        return True

    # -- consumer side ------------------------------------------------------------------------

    async def get(self) -> T:
        """Take the oldest item; wait while empty; raise :class:`EndOfStream` once closed and empty."""
        buf = self._buf
        while not buf:
            if self._closed:
                raise EndOfStream(self.name)
            await self._wait(self._getters)
        item = buf.popleft()
        self.got_count += 1
        if self._putters:
            self._wake_one(self._putters)
        return item

    def get_nowait(self) -> T | None:
        """Take the oldest item if there is one, else None (never waits)."""
        if not self._buf:
            return None
        item = self._buf.popleft()
        self.got_count += 1
        if self._putters:
            self._wake_one(self._putters)
        return item

    async def __aiter__(self) -> AsyncIterator[T]:
        while True:
            try:
                item = await self.get()
            except EndOfStream:
                return
            yield item

    def stats(self) -> ChannelStats:
        """A consistent snapshot of the counters."""
        return ChannelStats(
            name=self.name,
            policy=self.policy.value,
            size=self.size,
            depth=len(self._buf),
            max_depth=self.max_depth,
            put=self.put_count,
            got=self.got_count,
            dropped=self.dropped,
        )

    # -- internals ----------------------------------------------------------------------------

    def _drop(self, item: T) -> None:
        self.dropped += 1
        if isinstance(item, Leased):
            item.release()

    async def _wait(self, waiters: deque[asyncio.Future[None]]) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        try:
            await fut
        except BaseException:
            # Cancelled while waiting: leave the queue, and if we had already been woken, pass
            # the wake-up on so that another waiter does not sleep through a ready item.
            with contextlib.suppress(ValueError):
                waiters.remove(fut)
            if fut.done() and not fut.cancelled():
                self._wake_one(waiters)
            raise

    @staticmethod
    def _wake_one(waiters: deque[asyncio.Future[None]]) -> None:
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    @staticmethod
    def _wake_all(waiters: deque[asyncio.Future[None]]) -> None:
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
