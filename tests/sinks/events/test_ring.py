from __future__ import annotations

from dataclasses import dataclass

import pytest

from edgepipe.sinks.events.ring import PacketRing


@dataclass
class Pkt:
    """A stand-in for an ``av.Packet``: the ring reads only its size."""

    size: int


def _fill(ring: PacketRing, n: int, *, every: int = 10, size: int = 100, step: int = 10) -> None:
    for i in range(n):
        ring.push(Pkt(size * (5 if i % every == 0 else 1)), i * step, i % every == 0, float(i))


def test_it_keeps_keep_ticks_back_to_a_keyframe_and_no_more() -> None:
    ring = PacketRing(capacity=1000, max_bytes=10**9, keep_ticks=150)
    _fill(ring, 100)  # pts 0..990, a keyframe every 100
    pts = [p for _, p, _, _ in ring.since(-1)]
    # The newest is 990; 990 - 150 = 840: the latest keyframe at or before it is 800.
    assert pts[0] == 800
    assert pts[-1] == 990
    assert len(ring) == 20


def test_since_starts_on_the_latest_keyframe_at_or_before_the_cutoff() -> None:
    ring = PacketRing(capacity=1000, max_bytes=10**9, keep_ticks=500)
    _fill(ring, 100)
    first = next(ring.since(950))
    assert (first[1], first[2]) == (900, True)
    assert next(ring.since(899))[1] == 800
    assert next(ring.since(0))[1] == 400  # older than held (990 - 500 = 490): the oldest keyframe


@pytest.mark.parametrize(("capacity", "max_bytes"), [(16, 10**9), (1000, 2_000)])
def test_it_is_bounded_by_count_and_by_bytes_and_says_what_it_let_go_early(
    capacity: int, max_bytes: int
) -> None:
    ring = PacketRing(capacity=capacity, max_bytes=max_bytes, keep_ticks=10**6)
    slots = ring._packets
    for n in range(1, 500):
        _fill(ring, 1) if n == 1 else ring.push(Pkt(100), n * 10, n % 10 == 0, 0.0)
        assert len(ring) <= capacity
        assert ring.nbytes <= max_bytes
    assert ring._packets is slots  # the slots were allocated once
    assert len(slots) == capacity
    assert ring.evicted_early > 0


def test_clear_lets_every_packet_go() -> None:
    ring = PacketRing(capacity=8, max_bytes=10**6, keep_ticks=100)
    _fill(ring, 8)
    ring.clear()
    assert (len(ring), ring.nbytes, list(ring.since(0))) == (0, 0, [])
    assert all(p is None for p in ring._packets)


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 packets"):
        PacketRing(1, 100, 0)
    with pytest.raises(ValueError, match="max_bytes must be positive"):
        PacketRing(4, 0, 0)
