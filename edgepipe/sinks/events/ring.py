"""The pre-roll: a fixed-size ring of the latest encoded packets of one stream.

:class:`PacketRing` keeps, for each packet, the packet itself, its pts (the encoder's time
base), whether it starts a keyframe, its size and the wall-clock time of its frame. Its slots
are allocated once (``capacity`` of them); a push overwrites the oldest slot when the ring is
full, or when the bytes held would pass ``max_bytes``. Packets older than needed to cover
``keep_s`` back from the newest one, starting on a keyframe, are let go as newer ones come.

Not thread-safe: the recorder uses it from its one worker thread.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any


class PacketRing:
    """The latest encoded packets, bounded by count and by bytes, covering ``keep_s`` seconds
    (``keep_ticks`` in the encoder's time base) back to a keyframe where the bounds allow."""

    __slots__ = ("_bytes", "_count", "_head", "_key", "_packets", "_pts", "_size", "_wall", "capacity",
                 "evicted_early", "keep_ticks", "max_bytes")  # fmt: skip

    def __init__(self, capacity: int, max_bytes: int, keep_ticks: int) -> None:
        """Raises ``ValueError`` for a capacity below 2, ``max_bytes`` below 1 or a negative
        ``keep_ticks``."""
        if capacity < 2:
            raise ValueError(f"a packet ring needs room for at least 2 packets, not {capacity}")
        if max_bytes < 1 or keep_ticks < 0:
            raise ValueError(
                f"max_bytes must be positive and keep_ticks not negative ({max_bytes}, {keep_ticks})"
            )
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.keep_ticks = keep_ticks
        self._packets: list[Any] = [None] * capacity
        self._pts = array("q", bytes(8 * capacity))
        self._wall = array("d", bytes(8 * capacity))
        self._size = array("q", bytes(8 * capacity))
        self._key = bytearray(capacity)
        self._head = 0  # the oldest slot
        self._count = 0
        self._bytes = 0
        self.evicted_early = 0
        """Packets let go by a bound (count or bytes) while still within ``keep_s``: the ring is
        too small for the stream's bitrate, and pre-roll is shorter than asked."""

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """Bytes of packet data held."""
        return self._bytes

    def clear(self) -> None:
        packets = self._packets
        for i in range(self.capacity):
            packets[i] = None
        self._head = self._count = self._bytes = 0

    def push(self, packet: Any, pts: int, keyframe: bool, wall_s: float) -> None:
        """Add the newest packet (its pts not below the previous one's), letting the oldest go
        as the bounds and ``keep_ticks`` say."""
        size = packet.size
        cap = self.capacity
        while self._count and (self._count == cap or self._bytes + size > self.max_bytes):
            if self._pts[self._head] >= pts - self.keep_ticks:
                self.evicted_early += 1
            self._drop_oldest()
        slot = (self._head + self._count) % cap
        self._packets[slot] = packet
        self._pts[slot] = pts
        self._wall[slot] = wall_s
        self._size[slot] = size
        self._key[slot] = keyframe
        self._count += 1
        self._bytes += size
        self._trim(pts - self.keep_ticks)

    def _drop_oldest(self) -> None:
        head = self._head
        self._packets[head] = None
        self._bytes -= self._size[head]
        self._head = (head + 1) % self.capacity
        self._count -= 1

    def _trim(self, cutoff: int) -> None:
        """Let go of the packets before the latest keyframe at or before ``cutoff``: a clip
        starting at ``cutoff`` begins on that keyframe and needs nothing older."""
        start = self.start_index(cutoff)
        for _ in range(start):
            self._drop_oldest()

    def start_index(self, cutoff: int) -> int:
        """The position (0: the oldest) of the latest keyframe at or before ``cutoff``; else of
        the oldest keyframe held; else ``len(self)`` (no keyframe: nothing a decoder can start
        from)."""
        cap = self.capacity
        best = -1
        for i in range(self._count):
            slot = (self._head + i) % cap
            if not self._key[slot]:
                continue
            if self._pts[slot] <= cutoff or best < 0:
                best = i
            if self._pts[slot] > cutoff:
                break
        return self._count if best < 0 else best

    def since(self, cutoff: int) -> Iterator[tuple[Any, int, bool, float]]:
        """``(packet, pts, keyframe, wall_s)`` from the latest keyframe at or before ``cutoff``
        (or the oldest keyframe held) to the newest packet, oldest first."""
        cap = self.capacity
        for i in range(self.start_index(cutoff), self._count):
            slot = (self._head + i) % cap
            yield self._packets[slot], self._pts[slot], bool(self._key[slot]), self._wall[slot]
