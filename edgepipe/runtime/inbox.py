"""A node's inbox: one :class:`~edgepipe.core.channel.Channel` (lane) per input edge.

Each lane keeps its own policy and size, so a flood on one (frames on a ``latest`` lane) never
costs another (results on a ``block`` lane) an item. The inbox hands items out in the order they
arrived, across its lanes, and says which lane each came from (:attr:`Inbox.lane`). A full
``latest`` lane whose item is replaced by a newer one keeps its place in line, so cameras
feeding one detector through such lanes are served in turn: none waits behind the others
because its frames happen to arrive just after theirs. It ends
when every lane has ended and been drained: :meth:`Inbox.get` then raises :class:`EndOfStream`.

Not thread-safe: use it from the event loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from edgepipe.core.channel import Channel, Policy, Wakeups
from edgepipe.core.errors import EndOfStream
from edgepipe.core.lease import Leased
from edgepipe.core.markers import EMPTY


class Inbox:
    """A node's input lanes, read in arrival order by one consumer task."""

    __slots__ = ("_aging", "_wakeups", "channels", "lane", "node_id")

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.channels: list[Channel[Any]] = []
        self._wakeups = Wakeups(node_id)
        self.lane = ""
        """The name of the lane the last item taken came from."""
        self._aging = False

    @property
    def getters(self) -> deque[asyncio.Future[None]]:
        """The consumer's waiting futures (any lane's put wakes one): a task that must wake
        when an item arrives without taking it adds its own future here."""
        return self._wakeups.getters

    def add(self, name: str, size: int, policy: Policy | str, max_age_s: float | None = None) -> Channel[Any]:
        """A new lane, fed by one producer. ``max_age_s``: items older than that (by their
        ``t_decoded_ns``) when the node would start on them are skipped and counted."""
        if any(c.name == name for c in self.channels):
            raise ValueError(f"inbox '{self.node_id}' already has a lane named '{name}'")
        channel: Channel[Any] = Channel(name, size, policy, wakeups=self._wakeups)
        if max_age_s is not None:
            channel.max_age_ns = int(max_age_s * 1e9)
            self._aging = True
        self.channels.append(channel)
        if len(self.channels) == 1:
            self.lane = name
        else:  # arrival order across lanes matters now
            for c in self.channels:
                c.track_arrivals()
        return channel

    def detach(self) -> None:
        """The consumer is gone: every lane drops what it holds and discards later puts."""
        for channel in self.channels:
            channel.detach()

    def get_nowait(self, skip: frozenset[str] = frozenset()) -> Any:
        """The item that arrived first, across lanes (but those named in ``skip``: a node that
        holds all it may of theirs); :data:`EMPTY` if none is queued. Raises
        :class:`EndOfStream` once every lane is closed and drained."""
        if self._aging:
            return self._fresh(skip)
        return self._next(skip)

    def _fresh(self, skip: frozenset[str]) -> Any:
        """The next item that is not past its lane's ``max_age_s``; older ones are released."""
        while True:
            item = self._next(skip)
            if item is EMPTY:
                return item
            channel = self._channel(self.lane)
            born = getattr(item, "t_decoded_ns", None) if channel.max_age_ns else None
            if born is None or time.monotonic_ns() - born <= channel.max_age_ns:
                return item
            channel.aged += 1
            if isinstance(item, Leased):
                item.release()

    def _channel(self, name: str) -> Channel[Any]:
        channels = self.channels
        if len(channels) == 1:
            return channels[0]
        return next(c for c in channels if c.name == name)

    def _next(self, skip: frozenset[str]) -> Any:
        channels = self.channels
        if len(channels) == 1:
            channel = channels[0]
            if channel.queue:
                return EMPTY if skip and channel.name in skip else channel.take()
            if channel.closed:
                raise EndOfStream(self.node_id)
            return EMPTY
        first: Channel[Any] | None = None
        for channel in channels:
            if (
                channel.queue
                and (first is None or channel.head_arrival() < first.head_arrival())
                and (not skip or channel.name not in skip)
            ):
                first = channel
        if first is not None:
            self.lane = first.name
            return first.take()
        if all(c.closed and not c.queue for c in channels):
            raise EndOfStream(self.node_id)
        return EMPTY

    async def get(self) -> Any:
        """Take the next item in arrival order; wait while empty; raise :class:`EndOfStream`
        once every lane is closed and drained."""
        while True:
            item = self.get_nowait()
            if item is not EMPTY:
                return item
            await self._wakeups.wait()
