"""Emission: handing a node's items to its consumers' lanes, with leases and backpressure.

Every consumer gets the same object (no copy). A pooled (:class:`~edgepipe.core.lease.Leased`)
item's reference is shared out: the emitter's own becomes the first consumer's, and one more is
taken for each further consumer; a lane that drops the item releases that consumer's share.
Time spent waiting for a full ``block`` lane is counted as the node's ``blocked`` time.

The per-item loops inline the common case (one consumer, no ``--results`` to write): a single
`~edgepipe.core.channel.Channel.offer`, awaiting :meth:`Outputs.put_single` only when the lane
is a full ``block`` one. Everything else goes through :meth:`Outputs.emit`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from edgepipe.core.channel import Channel
from edgepipe.core.lease import Leased
from edgepipe.runtime.metrics import NodeMetrics

_clock = time.perf_counter_ns


class ConsumersGone(BaseException):
    """Every channel this node feeds has been detached by its consumer: nobody is listening,
    so the node ends instead of producing into the void. A BaseException so that no error
    policy mistakes it for a failure of the node's code."""


class ResultsLog(Protocol):
    """Where results are recorded (``--results``): :class:`~edgepipe.wire.results.ResultsWriter`."""

    async def write(self, item: Any, node_id: str) -> None: ...


class Outputs:
    """The lanes a node's items go to: one in each consumer's inbox."""

    __slots__ = ("channels", "metrics", "node_id", "results")

    def __init__(self, node_id: str, metrics: NodeMetrics) -> None:
        self.node_id = node_id
        self.metrics = metrics
        self.channels: list[Channel[Any]] = []
        self.results: ResultsLog | None = None
        """Set when this node feeds a sink and results are recorded: what it emits is written."""

    def connect(self, channel: Channel[Any]) -> None:
        channel.add_producer()
        self.channels.append(channel)

    @property
    def single(self) -> Channel[Any] | None:
        """The one lane, when emitting is just putting there (one consumer, nothing recorded)."""
        return self.channels[0] if len(self.channels) == 1 and self.results is None else None

    def close(self) -> None:
        for channel in self.channels:
            channel.close()

    async def emit(self, item: Any) -> None:
        """Hand ``item`` to every consumer; wait while a ``block`` lane is full.

        Raises :class:`ConsumersGone` once every consumer has detached.
        """
        leased = isinstance(item, Leased)
        if self.results is not None:
            # Before the puts: once a consumer has it, a pooled item may be freed at any time.
            try:
                await self.results.write(item, self.node_id)
            except BaseException:  # stopped while the disk was slow: nobody got it
                if leased:
                    item.release()
                raise
        channels = self.channels
        count = len(channels)
        if count == 0:
            if leased:
                item.release()
        elif count > 1 and leased:
            item.retain(count - 1)  # the emitter's reference becomes the first consumer's
        handed = 0
        try:
            for channel in channels:
                handed += 1  # put() either takes the reference or drops and releases it
                if not channel.offer(item):
                    await self.put(channel, item)
        except asyncio.CancelledError:
            # Cancelled while waiting in a blocking put: that one and the rest never got theirs.
            if leased:
                for _ in range(count - handed + 1):
                    item.release()
            raise
        except ConsumersGone:
            # That lane discarded (and released) its share; the ones after it never got theirs.
            if leased:
                for _ in range(count - handed):
                    item.release()
            raise
        self.metrics.items_out += 1

    async def put_single(self, item: Any) -> None:
        """The slow path of the inlined case (one consumer): :meth:`put`, releasing a pooled
        item whose put was cancelled."""
        try:
            await self.put(self.channels[0], item)
        except asyncio.CancelledError:
            if isinstance(item, Leased):
                item.release()
            raise

    async def put(self, channel: Channel[Any], item: Any) -> None:
        """The slow path of a put: wait for room (counted as blocked time). Raises
        :class:`ConsumersGone` if the item was discarded because every consumer has gone."""
        t0 = _clock()
        accepted = await channel.put(item)
        self.metrics.blocked_ns += _clock() - t0
        if not accepted and channel.detached and all(c.detached for c in self.channels):
            raise ConsumersGone
