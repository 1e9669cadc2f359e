"""Bounded channels: one per input edge of a node, gathered in the node's :class:`Inbox`.

A :class:`Channel` (a *lane* of its consumer's inbox) carries one producer's items to one
consumer. Its size is fixed and its policy says what a full channel does to a new item:

- ``block``: the producer waits (lossless: files, results).
- ``latest``: the oldest item is dropped to make room (live video: a slow consumer skips frames
  instead of falling behind).
- ``drop_new``: the new item is dropped (keep what is already queued).

Every drop is counted. A dropped :class:`~edgepipe.core.lease.Leased` item (a pooled frame) is
released, so a pool is never starved by a queue. There is no unbounded queue anywhere.

A node with several inputs has one channel per input in its inbox, each with its own policy
and size: frames arriving on a ``latest`` lane never push a detection out of a ``block`` lane.
The inbox hands items out in the order they arrived, across its lanes, and says which lane each
came from (:attr:`Inbox.lane`).

A channel ends when its producer calls :meth:`Channel.close`; the inbox ends when every lane has
ended and been drained: :meth:`Inbox.get` then raises :class:`EndOfStream`. A consumer that stops
early calls :meth:`Inbox.detach`, after which puts are discarded (and counted) instead of
blocking forever.

The producer's fast path is :meth:`Channel.offer` (never waits) and the consumer's is
:meth:`Inbox.get_nowait`; they await only when a ``block`` lane is full or the inbox is empty.

Not thread-safe: use it from the event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from edgepipe.core.errors import ChannelClosed, EndOfStream
from edgepipe.core.lease import Leased
from edgepipe.core.markers import EMPTY

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
    """The lane's name in its consumer's inbox (the producer's id unless named)."""
    consumer: str
    """The id of the node whose inbox it is part of."""
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
    """A bounded channel with a drop policy: one lane of an :class:`Inbox`.

    ``Channel(name, size, policy)`` alone makes a one-lane inbox of its own, so a channel can be
    used directly (``put``/``get``); a node's lanes are made by :meth:`Inbox.add`.
    """

    __slots__ = (
        "_closed",
        "_detached",
        "_getters",
        "_inbox",
        "_putters",
        "_seqs",
        "evicted",
        "max_depth",
        "name",
        "policy",
        "producers",
        "put_count",
        "queue",
        "refused",
        "size",
    )

    def __init__(
        self, name: str, size: int = 8, policy: Policy | str = Policy.BLOCK, *, inbox: Inbox | None = None
    ) -> None:
        if size < 1:
            raise ValueError(f"channel '{name}': size must be at least 1, got {size}")
        self.name = name
        self.policy = Policy.parse(policy)
        self.size = size
        self.queue: deque[T] = deque()
        """The queued items: read-only outside the channel (its truth tells whether
        :meth:`take` may be called)."""
        self._putters: deque[asyncio.Future[None]] = deque()
        self._seqs: deque[int] | None = None
        """Arrival numbers of the queued items, kept only in an inbox of several lanes."""
        self.producers = 0
        self._closed = False
        self._detached = False
        self.put_count = 0
        self.evicted = 0
        """Queued items dropped (``latest`` making room, detach)."""
        self.refused = 0
        """New items dropped (``drop_new``, or put after detach)."""
        self.max_depth = 0
        if inbox is None:
            inbox = Inbox(name)
            inbox.attach(self)
        self._inbox = inbox
        self._getters = inbox.getters

    # -- wiring -------------------------------------------------------------------------------

    @property
    def inbox(self) -> Inbox:
        return self._inbox

    def add_producer(self) -> None:
        """Register one more producer; the channel ends when each has called :meth:`close`."""
        if self._closed:
            raise ChannelClosed(self.name)
        self.producers += 1

    def close(self) -> None:
        """One producer is done. When the last one is, the consumer drains and then ends."""
        if self._closed:
            return
        self.producers -= 1
        if self.producers <= 0:
            self._closed = True
            _wake_all(self._getters)

    def detach(self) -> None:
        """The consumer is gone: drop what is queued and discard every later put (counted)."""
        self._detached = True
        self._closed = True
        while self.queue:
            self.evicted += 1
            self._pop_seq()
            _release(self.queue.popleft())
        _wake_all(self._getters)
        _wake_all(self._putters)

    @property
    def closed(self) -> bool:
        """True once every producer closed it, or the consumer detached."""
        return self._closed

    @property
    def detached(self) -> bool:
        """True once the consumer detached: puts are discarded."""
        return self._detached

    def __len__(self) -> int:
        return len(self.queue)

    # -- producer side ------------------------------------------------------------------------

    def offer(self, item: T) -> bool:
        """Queue ``item`` by the policy without waiting. True: done with it (queued, or dropped
        by the policy and counted). False: nothing done; the channel is a full ``block`` one or
        closed, and :meth:`put` must be awaited instead."""
        buf = self.queue
        if len(buf) < self.size and not self._closed:
            buf.append(item)
            self.put_count += 1
            if self._seqs is not None:
                self._seqs.append(self._inbox.arrival())
            if len(buf) > self.max_depth:
                self.max_depth = len(buf)
            if self._getters:
                _wake_one(self._getters)
            return True
        if self._closed:
            return False
        policy = self.policy
        if policy is Policy.LATEST:
            self.evicted += 1
            self._pop_seq()
            _release(buf.popleft())
            return self.offer(item)
        if policy is Policy.DROP_NEW:
            self.refused += 1
            _release(item)
            return True
        return False

    async def put(self, item: T) -> bool:
        """Queue ``item`` by the channel's policy; return False if it (not another) was dropped.

        Waits only under ``block`` while the channel is full. Raises :class:`ChannelClosed` if
        every producer already closed the channel.
        """
        while True:
            if self._closed:
                if self._detached:
                    self.refused += 1
                    _release(item)
                    return False
                raise ChannelClosed(self.name)
            if len(self.queue) < self.size or self.policy is not Policy.BLOCK:
                before = self.refused
                self.offer(item)
                return self.refused == before
            await _wait(self._putters)

    # -- consumer side (through the inbox) ----------------------------------------------------

    def take(self) -> T:
        """Remove the oldest item (the channel must not be empty); wakes a waiting producer."""
        item = self.queue.popleft()
        if self._seqs is not None:
            self._seqs.popleft()
        if self._putters:
            _wake_one(self._putters)
        return item

    def head_arrival(self) -> int:
        """Arrival number of the oldest queued item (inboxes of several lanes only)."""
        assert self._seqs is not None
        return self._seqs[0]

    async def get(self) -> T:
        """The next item of this channel's inbox (a channel used on its own: this channel's)."""
        item: T = await self._inbox.get()
        return item

    def get_nowait(self) -> T | None:
        """The next item if there is one, else None (never waits)."""
        item = self._inbox.get_nowait()
        return None if item is EMPTY else item

    async def __aiter__(self) -> AsyncIterator[T]:
        while True:
            try:
                item = await self.get()
            except EndOfStream:
                return
            yield item

    def stats(self) -> ChannelStats:
        """A consistent snapshot of the counters."""
        depth = len(self.queue)
        return ChannelStats(
            name=self.name,
            consumer=self._inbox.node_id,
            policy=self.policy.value,
            size=self.size,
            depth=depth,
            max_depth=self.max_depth,
            put=self.put_count,
            got=self.put_count - self.evicted - depth,
            dropped=self.evicted + self.refused,
        )

    def _pop_seq(self) -> None:
        if self._seqs is not None:
            self._seqs.popleft()


class Inbox:
    """A node's inbox: one :class:`Channel` (lane) per input edge, read in arrival order.

    One consumer task reads it (several may wait; each item goes to one of them).
    """

    __slots__ = ("_arrivals", "channels", "getters", "lane", "node_id")

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.channels: list[Channel[Any]] = []
        self.getters: deque[asyncio.Future[None]] = deque()
        self.lane = ""
        """The name of the lane the last item taken came from."""
        self._arrivals = 0

    def add(self, name: str, size: int, policy: Policy | str) -> Channel[Any]:
        """A new lane, fed by one producer."""
        if any(c.name == name for c in self.channels):
            raise ValueError(f"inbox '{self.node_id}' already has a lane named '{name}'")
        channel: Channel[Any] = Channel(name, size, policy, inbox=self)
        self.attach(channel)
        return channel

    def attach(self, channel: Channel[Any]) -> None:
        self.channels.append(channel)
        if len(self.channels) == 1:
            self.lane = channel.name
        else:  # arrival order across lanes matters now: number what is queued
            for c in self.channels:
                if c._seqs is None:
                    c._seqs = deque(self.arrival() for _ in range(len(c)))

    def arrival(self) -> int:
        self._arrivals += 1
        return self._arrivals

    @property
    def size(self) -> int:
        """Items it can hold in all: the sum of its lanes."""
        return sum(c.size for c in self.channels)

    def __len__(self) -> int:
        return sum(len(c) for c in self.channels)

    @property
    def closed(self) -> bool:
        return all(c.closed for c in self.channels)

    def detach(self) -> None:
        """The consumer is gone: every lane drops what it holds and discards later puts."""
        for channel in self.channels:
            channel.detach()

    def get_nowait(self) -> Any:
        """The item that arrived first, across lanes; :data:`EMPTY` if none is queued.
        Raises :class:`EndOfStream` once every lane is closed and drained."""
        channels = self.channels
        if len(channels) == 1:
            channel = channels[0]
            if channel.queue:
                return channel.take()
            if channel._closed:
                raise EndOfStream(self.node_id)
            return EMPTY
        first: Channel[Any] | None = None
        for channel in channels:
            if channel.queue and (first is None or channel.head_arrival() < first.head_arrival()):
                first = channel
        if first is not None:
            self.lane = first.name
            return first.take()
        if all(c._closed for c in channels):
            raise EndOfStream(self.node_id)
        return EMPTY

    async def get(self) -> Any:
        """Take the next item in arrival order; wait while empty; raise :class:`EndOfStream`
        once every lane is closed and drained."""
        while True:
            item = self.get_nowait()
            if item is not EMPTY:
                return item
            await _wait(self.getters)


def _release(item: Any) -> None:
    if isinstance(item, Leased):
        item.release()


async def _wait(waiters: deque[asyncio.Future[None]]) -> None:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiters.append(fut)
    try:
        await fut
    except BaseException:
        # Cancelled while waiting: leave the queue, and if we had already been woken, pass the
        # wake-up on so that another waiter does not sleep through a ready item.
        with contextlib.suppress(ValueError):
            waiters.remove(fut)
        if fut.done() and not fut.cancelled():
            _wake_one(waiters)
        raise


def _wake_one(waiters: deque[asyncio.Future[None]]) -> None:
    while waiters:
        fut = waiters.popleft()
        if not fut.done():
            fut.set_result(None)
            return


def _wake_all(waiters: deque[asyncio.Future[None]]) -> None:
    while waiters:
        fut = waiters.popleft()
        if not fut.done():
            fut.set_result(None)
