from __future__ import annotations

import asyncio
import tracemalloc

import pytest

from edgepipe.core.channel import Channel, Policy
from edgepipe.core.errors import ChannelClosed, EndOfStream
from edgepipe.core.lease import Leased
from edgepipe.runtime.inbox import Inbox

N_ITEMS = 600


class Pooled(Leased):
    """An item that, like a pooled frame, must be given back when dropped."""

    def __init__(self, n: int, released: list[int]) -> None:
        super().__init__()
        self.n = n
        self.released = released

    def _free(self) -> None:
        self.released.append(self.n)


ITEM_BYTES = 100_000


async def _fast_producer(channel: Channel[bytearray | int], n: int, *, big: bool) -> int:
    """Puts n items as fast as the channel allows; returns how many put() accepted."""
    accepted = 0
    for i in range(n):
        item: bytearray | int = bytearray(ITEM_BYTES) if big else i
        if big:
            item[0:8] = i.to_bytes(8, "little")  # type: ignore[index]
        if await channel.put(item):
            accepted += 1
        if i % 10 == 0:
            await asyncio.sleep(0)  # 10 items per consumer step: 10x faster
    channel.close()
    return accepted


async def _slow_consumer(channel: Channel[bytearray | int]) -> list[int]:
    got = []
    while True:
        try:
            item = await channel.get()
        except EndOfStream:
            return got
        got.append(int.from_bytes(item[0:8], "little") if isinstance(item, bytearray) else item)
        await asyncio.sleep(0)


@pytest.mark.parametrize("policy", ["latest", "drop_new"])
async def test_lossy_policy_keeps_memory_bounded_and_counts_every_drop(policy: str) -> None:
    channel: Channel[bytearray | int] = Channel("inbox", size=4, policy=policy)
    channel.add_producer()
    tracemalloc.start()
    try:
        accepted, got = await asyncio.gather(
            _fast_producer(channel, N_ITEMS, big=True), _slow_consumer(channel)
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stats = channel.stats()
    # Exact accounting: every item was either delivered or counted as dropped, once.
    assert stats.got == len(got)
    assert len(got) + stats.dropped == N_ITEMS
    assert stats.dropped > N_ITEMS // 2  # the consumer really was much slower
    assert stats.max_depth <= 4
    # 600 items of 100 kB would be 60 MB unbounded; a bounded queue holds a handful at once.
    assert peak < 20 * ITEM_BYTES
    assert got == sorted(got)  # order preserved
    if policy == "latest":
        assert got[-1] == N_ITEMS - 1  # the newest item always survives
        assert accepted == N_ITEMS  # latest accepts the new item and drops an old one
    else:
        assert got[:4] == [0, 1, 2, 3]  # what was queued first survives
        assert accepted == len(got)


async def test_block_policy_is_lossless_and_makes_the_producer_wait() -> None:
    channel: Channel[bytearray | int] = Channel("inbox", size=3, policy=Policy.BLOCK)
    channel.add_producer()
    accepted, got = await asyncio.gather(_fast_producer(channel, N_ITEMS, big=False), _slow_consumer(channel))
    assert got == list(range(N_ITEMS))
    assert accepted == N_ITEMS
    stats = channel.stats()
    assert stats.dropped == 0
    assert stats.max_depth == 3


async def test_end_of_stream_after_drain_and_only_after_last_producer_closes() -> None:
    channel: Channel[int] = Channel("inbox", size=8)
    channel.add_producer()
    channel.add_producer()
    await channel.put(1)
    channel.close()
    await channel.put(2)  # the second producer is still open
    channel.close()
    assert [await channel.get(), await channel.get()] == [1, 2]
    with pytest.raises(EndOfStream):
        await channel.get()
    with pytest.raises(ChannelClosed):
        await channel.put(3)


async def test_waiting_consumer_wakes_on_close() -> None:
    channel: Channel[int] = Channel("inbox", size=2)
    channel.add_producer()
    getter = asyncio.ensure_future(channel.get())
    await asyncio.sleep(0)
    assert not getter.done()
    channel.close()
    with pytest.raises(EndOfStream):
        await asyncio.wait_for(getter, 1)


async def test_detach_releases_a_blocked_producer_and_discards_later_items() -> None:
    released: list[int] = []

    channel: Channel[Pooled] = Channel("inbox", size=1)
    channel.add_producer()
    await channel.put(Pooled(0, released))
    blocked = asyncio.ensure_future(channel.put(Pooled(1, released)))
    await asyncio.sleep(0)
    assert not blocked.done()
    channel.detach()
    assert await asyncio.wait_for(blocked, 1) is False
    assert await channel.put(Pooled(2, released)) is False
    assert released == [0, 1, 2]  # pooled items go back to their pool when dropped
    assert channel.stats().dropped == 3


async def test_cancelled_getter_passes_its_wakeup_on() -> None:
    channel: Channel[int] = Channel("inbox", size=4)
    channel.add_producer()
    first = asyncio.ensure_future(channel.get())
    second = asyncio.ensure_future(channel.get())
    await asyncio.sleep(0)
    await channel.put(7)  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert await asyncio.wait_for(second, 1) == 7


async def test_latest_drops_release_pooled_items() -> None:
    released: list[int] = []

    channel: Channel[Pooled] = Channel("inbox", size=2, policy="latest")
    channel.add_producer()
    for n in range(5):
        await channel.put(Pooled(n, released))
    assert released == [0, 1, 2]
    assert [(await channel.get()).n, (await channel.get()).n] == [3, 4]


def test_bad_policy_and_size_are_refused_with_the_valid_choices() -> None:
    with pytest.raises(ValueError, match="block, latest, drop_new"):
        Channel("x", 2, "newest")
    with pytest.raises(ValueError, match="size must be at least 1"):
        Channel("x", 0)


# -- an inbox of several lanes ----------------------------------------------------------------


async def test_an_inbox_hands_items_out_in_arrival_order_across_lanes() -> None:
    inbox = Inbox("node")
    frames = inbox.add("frames", 1, "latest")
    faces = inbox.add("faces", 8, "block")
    for channel in (frames, faces):
        channel.add_producer()
    await faces.put("face-1")
    await frames.put("frame-1")
    await frames.put("frame-2")  # replaces frame-1: the newest frame, queued after face-1
    await faces.put("face-2")
    got = []
    for _ in range(3):
        got.append((await inbox.get(), inbox.lane))
    assert got == [("face-1", "faces"), ("frame-2", "frames"), ("face-2", "faces")]
    assert frames.stats().dropped == 1
    assert faces.stats().dropped == 0
    frames.close()
    faces.close()
    with pytest.raises(EndOfStream):
        await inbox.get()


async def test_a_full_latest_lane_never_pushes_out_a_block_lanes_item() -> None:
    inbox = Inbox("node")
    frames = inbox.add("frames", 1, "latest")
    results = inbox.add("results", 2, "block")
    frames.add_producer()
    results.add_producer()
    await results.put(1)
    await results.put(2)
    for n in range(100):  # a flood of frames
        await frames.put(n)
    blocked = asyncio.ensure_future(results.put(3))  # lossless: waits for room instead
    await asyncio.sleep(0)
    assert not blocked.done()
    assert [await inbox.get() for _ in range(2)] == [1, 2]
    assert await asyncio.wait_for(blocked, 1) is True
    assert sorted([await inbox.get(), await inbox.get()]) == [3, 99]
    assert results.stats().dropped == 0
    assert frames.stats().dropped == 99


async def test_an_inbox_ends_when_every_lane_has_ended_and_drained() -> None:
    inbox = Inbox("node")
    a, b = inbox.add("a", 2, "block"), inbox.add("b", 2, "block")
    a.add_producer()
    b.add_producer()
    await a.put(1)
    a.close()
    assert await inbox.get() == 1
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    assert not waiting.done()  # b is still open
    await b.put(2)
    assert await asyncio.wait_for(waiting, 1) == 2
    b.close()
    with pytest.raises(EndOfStream):
        await inbox.get()


def test_lane_names_are_unique_in_an_inbox() -> None:
    inbox = Inbox("node")
    inbox.add("frames", 1, "latest")
    with pytest.raises(ValueError, match="already has a lane named 'frames'"):
        inbox.add("frames", 2, "block")
