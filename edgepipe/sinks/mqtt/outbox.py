"""The MQTT sink's outbox: messages waiting for the broker, bounded, never blocking the pipeline.

:meth:`Outbox.put` never waits: when the box holds ``size`` messages, one goes — the oldest of
the lowest rank (a frame's detections before an event, an event before a camera's state; see
:class:`~edgepipe.sinks.mqtt.topics.KindPolicy`), or the new one itself when it ranks below
everything held. Each drop is counted by kind (and, for a QoS 1 or 2 one, timed: when the first
and the last were). A retained message (a state: only the latest
matters) replaces the one for the same topic still waiting, so a camera flapping during an
outage leaves one message, not a backlog.

Messages leave in the order they came (:meth:`take`, :meth:`wait`); one whose publish failed goes back to the
front (:meth:`put_back`) to be sent first after the reconnect. Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque

from edgepipe.sinks.mqtt.config import checked_outbox_size
from edgepipe.sinks.mqtt.topics import Publication


class Outbox:
    """At most ``size`` publications waiting (see the module docstring)."""

    def __init__(self, size: int) -> None:
        """Raises :class:`~edgepipe.sinks.mqtt.config.MqttConfigError` (a ``ValueError``) for a
        size below 1."""
        self.size = checked_outbox_size(size)
        self._lanes: dict[int, deque[tuple[int, Publication]]] = {}
        """By rank: (order, publication), oldest first."""
        self._order = itertools.count()
        self._front = itertools.count(-1, -1)  # put back: before everything queued since
        self._len = 0
        self._ready = asyncio.Event()
        self.dropped: Counter[str] = Counter()
        """Publications dropped to stay within ``size``, by kind."""
        self.dropped_asked_t: tuple[float, float] | None = None
        """When the first and the last publication of QoS 1 or 2 (delivery was asked for) were
        dropped, in wall-clock seconds; ``None`` while none was."""
        self.replaced = 0
        """Retained publications superseded by a newer one for their topic before they went."""

    def __len__(self) -> int:
        return self._len

    def put(self, pub: Publication) -> None:
        """Queue ``pub``; never waits (see the module docstring for what goes when full)."""
        self._add((next(self._order), pub), newer=True)

    def put_back(self, pub: Publication) -> None:
        """Return ``pub``, taken by :meth:`get` but not delivered, to the front of the box."""
        self._add((next(self._front), pub), newer=False)

    def _add(self, entry: tuple[int, Publication], *, newer: bool) -> None:
        pub = entry[1]
        if pub.retain and self._replace(pub, newer=newer):
            self.replaced += 1
            return
        if self._len >= self.size:
            lowest = min(rank for rank, lane in self._lanes.items() if lane)
            if pub.rank < lowest:
                self._drop(pub)
                return
            _, gone = self._lanes[lowest].popleft()
            self._len -= 1
            self._drop(gone)
        lane = self._lanes.setdefault(pub.rank, deque())
        if lane and entry[0] < lane[0][0]:
            lane.appendleft(entry)
        else:
            lane.append(entry)
        self._len += 1
        self._ready.set()

    def _drop(self, pub: Publication) -> None:
        self.dropped[pub.kind] += 1
        if pub.qos >= 1:
            now = time.time()
            self.dropped_asked_t = (self.dropped_asked_t[0] if self.dropped_asked_t else now, now)

    def _replace(self, pub: Publication, *, newer: bool) -> bool:
        """True when a message on ``pub``'s topic is waiting: a ``newer`` ``pub`` takes its
        place; an older one (put back) is superseded by it and goes no further."""
        lane = self._lanes.get(pub.rank)
        if not lane:
            return False
        for i, (order, queued) in enumerate(lane):
            if queued.topic == pub.topic:
                if newer:
                    lane[i] = (order, pub)
                return True
        return False

    def take(self) -> Publication | None:
        """The oldest publication, or None when the box is empty."""
        best: deque[tuple[int, Publication]] | None = None
        for lane in self._lanes.values():
            if lane and (best is None or lane[0][0] < best[0][0]):
                best = lane
        if best is None:
            self._ready.clear()
            return None
        self._len -= 1
        return best.popleft()[1]

    async def wait(self) -> None:
        """Until a publication is waiting or :meth:`wake` is called (then :meth:`take` may
        return None: the caller checks why it was woken)."""
        await self._ready.wait()

    def wake(self) -> None:
        """Wake :meth:`wait` (the connection closing)."""
        self._ready.set()

    def waiting(self) -> Counter[str]:
        """The publications waiting, by kind."""
        return Counter(pub.kind for lane in self._lanes.values() for _, pub in lane)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())
