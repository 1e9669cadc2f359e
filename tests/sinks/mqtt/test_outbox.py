from __future__ import annotations

import asyncio

import pytest

from edgepipe.sinks.mqtt.outbox import Outbox
from edgepipe.sinks.mqtt.topics import Publication, Topics

TOPICS = Topics("cam1", "test")


def pub(kind: str, n: int = 0, source: str = "camera") -> Publication:
    return TOPICS.publication(TOPICS.topic(source, kind), kind, str(n).encode())


def drain(box: Outbox) -> list[tuple[str, bytes]]:
    out = []
    while (p := box.take()) is not None:
        out.append((p.kind, p.payload))
    return out


def test_messages_leave_in_the_order_they_came() -> None:
    box = Outbox(10)
    for i, kind in enumerate(["detections", "event", "detections", "source_state"]):
        box.put(pub(kind, i))
    assert [p for _, p in drain(box)] == [b"0", b"1", b"2", b"3"]
    assert len(box) == 0


def test_full_it_drops_the_oldest_of_the_lowest_rank_and_counts_it() -> None:
    box = Outbox(3)
    box.put(pub("event", 1))
    box.put(pub("detections", 2))
    box.put(pub("detections", 3))
    box.put(pub("event", 4))  # full: the oldest detections go
    assert drain(box) == [("event", b"1"), ("detections", b"3"), ("event", b"4")]
    assert box.dropped == {"detections": 1}


def test_a_newcomer_of_lower_rank_than_everything_held_is_the_one_dropped() -> None:
    box = Outbox(2)
    box.put(pub("event", 1))
    box.put(pub("event", 2))
    box.put(pub("detections", 3))
    box.put(pub("event", 4))  # the oldest event goes: nothing ranks lower
    assert drain(box) == [("event", b"2"), ("event", b"4")]
    assert box.dropped == {"detections": 1, "event": 1}


def test_memory_stays_within_the_bound_whatever_comes() -> None:
    box = Outbox(50)
    for i in range(10_000):
        box.put(pub("detections" if i % 3 else "event", i))
        assert len(box) <= 50
    assert len(box) == 50
    assert box.dropped_total == 10_000 - 50
    kept = drain(box)
    assert all(kind == "event" for kind, _ in kept)  # the lower rank went first
    assert kept[-1] == ("event", b"9999")  # the newest stayed


def test_a_retained_state_replaces_the_one_still_waiting_for_its_topic() -> None:
    box = Outbox(10)
    box.put(pub("source_state", 1))
    box.put(pub("event", 2))
    box.put(pub("source_state", 3))  # same topic: takes the waiting one's place
    box.put(pub("source_state", 4, source="other"))
    assert drain(box) == [("source_state", b"3"), ("event", b"2"), ("source_state", b"4")]
    assert box.replaced == 1
    assert box.dropped_total == 0


def test_put_back_goes_first_unless_a_newer_state_for_its_topic_waits() -> None:
    box = Outbox(10)
    box.put(pub("detections", 1))
    box.put(pub("source_state", 2))
    box.put_back(pub("event", 0))
    box.put_back(pub("source_state", 1))  # older than the waiting one: superseded
    assert drain(box) == [("event", b"0"), ("detections", b"1"), ("source_state", b"2")]


async def test_wait_returns_when_something_comes_or_when_woken() -> None:
    box = Outbox(4)
    waiter = asyncio.ensure_future(box.wait())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    box.put(pub("event"))
    await asyncio.wait_for(waiter, 1)
    assert box.take() is not None
    assert box.take() is None
    waiter = asyncio.ensure_future(box.wait())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    box.wake()
    await asyncio.wait_for(waiter, 1)


def test_a_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Outbox(0)


async def test_a_publish_cut_off_by_a_lost_connection_goes_back_to_the_outbox() -> None:
    """The watcher sees the connection drop while a QoS 1 publish waits for its PUBACK: the
    drain is cancelled there, and that message must wait for the reconnect, not vanish uncounted."""
    from edgepipe.sinks.mqtt.client import Connection
    from edgepipe.sinks.mqtt.config import parse_broker_url

    class NoAck:
        async def publish(self, *args: object, **kwargs: object) -> None:
            await asyncio.sleep(3600)

    box = Outbox(10)
    connection = Connection(parse_broker_url("mqtt://127.0.0.1"), "id", TOPICS, box, lambda: [])
    box.put(pub("event", 1))
    drain_task = asyncio.create_task(connection._drain(NoAck()))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert len(box) == 0  # taken, in flight
    drain_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await drain_task
    assert drain(box) == [("event", b"1")]
