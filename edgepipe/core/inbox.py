"""A node's inbox: one :class:`~edgepipe.core.channel.Channel` (lane) per input edge.

Each lane keeps its own policy and size, so a flood on one (frames on a ``latest`` lane) never
costs another (results on a ``block`` lane) an item. The inbox hands items out in the order they
arrived, across its lanes, and says which lane each came from (:attr:`Inbox.lane`). It ends
when every lane has ended and been drained: :meth:`Inbox.get` then raises :class:`EndOfStream`.

Not thread-safe: use it from the event loop only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from edgepipe.core.channel import Channel, Policy, Wakeups
from edgepipe.core.errors import EndOfStream
from edgepipe.core.markers import EMPTY


class Inbox:
    """A node's input lanes, read in arrival order by one consumer task."""

    __slots__ = ("_wakeups", "channels", "lane", "node_id")

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.channels: list[Channel[Any]] = []
        self._wakeups = Wakeups(node_id)
        self.lane = ""
        """The name of the lane the last item taken came from."""

    @property
    def getters(self) -> deque[asyncio.Future[None]]:
        """The consumer's waiting futures (any lane's put wakes one): a task that must wake
        when an item arrives without taking it adds its own future here."""
        return self._wakeups.getters

    def add(self, name: str, size: int, policy: Policy | str) -> Channel[Any]:
        """A new lane, fed by one producer."""
        if any(c.name == name for c in self.channels):
            raise ValueError(f"inbox '{self.node_id}' already has a lane named '{name}'")
        channel: Channel[Any] = Channel(name, size, policy, wakeups=self._wakeups)
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

    def get_nowait(self) -> Any:
        """The item that arrived first, across lanes; :data:`EMPTY` if none is queued.
        Raises :class:`EndOfStream` once every lane is closed and drained."""
        channels = self.channels
        if len(channels) == 1:
            channel = channels[0]
            if channel.queue:
                return channel.take()
            if channel.closed:
                raise EndOfStream(self.node_id)
            return EMPTY
        first: Channel[Any] | None = None
        for channel in channels:
            if channel.queue and (first is None or channel.head_arrival() < first.head_arrival()):
                first = channel
        if first is not None:
            self.lane = first.name
            return first.take()
        if all(c.closed for c in channels):
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
