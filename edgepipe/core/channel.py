"""Bounded channels: one per input edge of a node, each a lane of the node's inbox.

A :class:`Channel` (a *lane* of its consumer's inbox) carries one producer's items to one
consumer. Its size is fixed and its policy says what a full channel does to a new item:

- ``block``: the producer waits (lossless: files, results).
- ``latest``: the oldest item is dropped to make room (live video: a slow consumer skips frames
  instead of falling behind).
- ``drop_new``: the new item is dropped (keep what is already queued).

Every drop is counted. A dropped :class:`~edgepipe.core.lease.Leased` item (a pooled frame) is
released, so a pool is never starved by a queue. There is no unbounded queue anywhere.

A node with several inputs has one channel per input in its
:class:`~edgepipe.runtime.inbox.Inbox`, each with its own policy and size: frames arriving on a
``latest`` lane never push a detection out of a ``block`` lane.

A channel ends when its producer calls :meth:`Channel.close`: the consumer drains what is
queued, then ``get()`` raises :class:`EndOfStream`. A consumer that stops early calls
:meth:`Channel.detach`, after which puts are discarded (and counted) instead of blocking forever.

The producer's fast path is :meth:`Channel.offer` (never waits) and the consumer's is
:meth:`Channel.take`; they await only when a ``block`` lane is full or the inbox is empty.

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
    shed: int = 0
    """Items the governor turned away to keep CPU headroom (counted apart from ``dropped``)."""
    aged: int = 0
    """Items skipped for being older than the lane's ``max_age_s`` when taken."""


class Wakeups:
    """What the lanes of one inbox share: the consumer's waiting futures, woken by any lane's
    put, and the count of arrivals that orders items across lanes."""

    __slots__ = ("arrivals", "getters", "node_id")

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.getters: deque[asyncio.Future[None]] = deque()
        self.arrivals = 0

    def arrival(self) -> int:
        self.arrivals += 1
        return self.arrivals

    async def wait(self) -> None:
        """Until a lane gets an item, ends or is detached."""
        await wait(self.getters)


class Channel(Generic[T]):
    """A bounded channel with a drop policy: one lane of an inbox.

    ``Channel(name, size, policy)`` alone is a channel of its own (``put``/``get``); a node's
    lanes are made by :meth:`~edgepipe.runtime.inbox.Inbox.add`, sharing the inbox's wake-ups.
    """

    __slots__ = (
        "_closed",
        "_detached",
        "_getters",
        "_putters",
        "_seqs",
        "_thin_count",
        "_wakeups",
        "aged",
        "evicted",
        "max_age_ns",
        "max_depth",
        "name",
        "policy",
        "producers",
        "put_count",
        "queue",
        "refused",
        "shed",
        "size",
        "thin",
    )

    def __init__(
        self, name: str, size: int = 8, policy: Policy | str = Policy.BLOCK, *, wakeups: Wakeups | None = None
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
        self.thin = 1
        """Keep one offered item in ``thin`` (the governor sets it on lossy lanes; 1: all)."""
        self._thin_count = 0
        self.shed = 0
        self.max_age_ns = 0
        """Items older than this when taken are skipped (0: no limit; see :class:`Inbox`)."""
        self.aged = 0
        self._wakeups = wakeups or Wakeups(name)
        self._getters = self._wakeups.getters

    # -- wiring -------------------------------------------------------------------------------

    @property
    def consumer(self) -> str:
        """The id of the node whose inbox this channel is part of."""
        return self._wakeups.node_id

    def track_arrivals(self) -> None:
        """Number each queued item as it arrives (an inbox of several lanes orders by it)."""
        if self._seqs is None:
            self._seqs = deque(self._wakeups.arrival() for _ in self.queue)

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
        by the policy or the governor's thinning, and counted). False: nothing done; the channel
        is a full ``block`` one or closed, and :meth:`put` must be awaited instead."""
        if self._closed:
            return False
        if self.thin > 1:
            self._thin_count += 1
            if self._thin_count % self.thin:
                self.shed += 1
                _release(item)
                return True
        buf = self.queue
        seqs = self._seqs
        place = 0
        if len(buf) >= self.size:
            policy = self.policy
            if policy is Policy.LATEST:
                self.evicted += 1
                _release(buf.popleft())
                if seqs is not None:
                    # The lane keeps its place in line: a newer frame replacing an older one
                    # does not send it to the back, so full lanes are served in turn.
                    place = seqs.popleft()
                    if seqs:
                        seqs[0], place = place, 0
            elif policy is Policy.DROP_NEW:
                self.refused += 1
                _release(item)
                return True
            else:
                return False
        buf.append(item)
        self.put_count += 1
        if seqs is not None:
            seqs.append(place or self._wakeups.arrival())
        if len(buf) > self.max_depth:
            self.max_depth = len(buf)
        if self._getters:
            _wake_one(self._getters)
        return True

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
                before = self.refused + self.shed
                self.offer(item)
                return self.refused + self.shed == before
            await wait(self._putters)

    # -- consumer side ------------------------------------------------------------------------

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
        """Take the oldest item; wait while empty; raise :class:`EndOfStream` once closed and
        empty (a channel used on its own: a node reads its lanes through its inbox)."""
        while not self.queue:
            if self._closed:
                raise EndOfStream(self.name)
            await wait(self._getters)
        return self.take()

    def get_nowait(self) -> T | None:
        """Take the oldest item if there is one, else None (never waits)."""
        return self.take() if self.queue else None

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
            consumer=self._wakeups.node_id,
            policy=self.policy.value,
            size=self.size,
            depth=depth,
            max_depth=self.max_depth,
            put=self.put_count,
            got=self.put_count - self.evicted - depth,
            dropped=self.evicted + self.refused,
            shed=self.shed,
            aged=self.aged,
        )

    def _pop_seq(self) -> None:
        if self._seqs is not None:
            self._seqs.popleft()


def _release(item: Any) -> None:
    if isinstance(item, Leased):
        item.release()


async def wait(waiters: deque[asyncio.Future[None]]) -> None:
    """Wait on a future of our own in ``waiters`` until woken (or cancelled)."""
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
