"""Frame age on lossy lanes, thinning by the governor, and node priorities as declared."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest

from edgepipe import GraphError, Input, Pipeline
from edgepipe.core.channel import Channel
from edgepipe.core.lease import Leased
from edgepipe.core.markers import EMPTY
from edgepipe.graph.spec import Priority
from edgepipe.runner import RunConfig
from edgepipe.runtime.inbox import Inbox
from edgepipe.testing import ListSink, run_pipeline


@dataclass
class Frame(Leased):
    seq: int
    t_decoded_ns: int
    released: bool = False

    def release(self) -> None:
        self.released = True


def test_an_item_older_than_its_lanes_max_age_is_skipped_counted_and_released() -> None:
    inbox = Inbox("faces")
    lane = inbox.add("camera", 4, "latest", max_age_s=0.05)
    now = time.monotonic_ns()
    old, fresh = Frame(1, now - 200_000_000), Frame(2, now)
    lane.offer(old)
    lane.offer(fresh)
    assert inbox.get_nowait() is fresh
    assert old.released
    assert not fresh.released
    stats = lane.stats()
    assert stats.aged == 1
    assert stats.dropped == 0
    assert inbox.get_nowait() is EMPTY


def test_items_without_a_decode_time_are_never_aged() -> None:
    inbox = Inbox("sink")
    lane = inbox.add("results", 2, "latest", max_age_s=0.001)
    lane.offer("a result")
    time.sleep(0.01)
    assert inbox.get_nowait() == "a result"


def test_age_is_checked_per_lane_in_an_inbox_of_several() -> None:
    inbox = Inbox("annotate")
    frames = inbox.add("frames", 2, "latest", max_age_s=0.05)
    boxes = inbox.add("boxes", 2, "block")
    now = time.monotonic_ns()
    frames.offer(Frame(1, now - 10**9))
    boxes.offer(Frame(2, now - 10**9))  # as old, but on a lossless lane: kept
    item = inbox.get_nowait()
    assert item.seq == 2
    assert inbox.lane == "boxes"
    assert frames.stats().aged == 1


def test_thinning_keeps_one_in_n_and_counts_the_rest_apart_from_drops() -> None:
    channel: Channel[Frame] = Channel("camera", 100, "latest")
    channel.thin = 3
    items = [Frame(i, 0) for i in range(9)]
    for item in items:
        assert channel.offer(item)
    assert [f.seq for f in channel.queue] == [2, 5, 8]
    assert sum(f.released for f in items) == 6
    stats = channel.stats()
    assert stats.shed == 6
    assert stats.dropped == 0
    assert stats.put == 3


def test_max_age_is_declared_on_lossy_lanes_only() -> None:
    p = Pipeline("p")
    cam = p.source("cam", [1, 2])
    res = p.source("res", [1, 2])
    p.sink("ok", print, inputs={"frames": Input(cam, "latest", 1), "results": res}, max_age_s=0.2)
    spec = p.validate().node("ok")
    assert [(lane.name, lane.max_age_s) for lane in spec.lanes] == [("frames", 0.2), ("results", None)]
    with pytest.raises(GraphError, match="lossless"):
        p.sink("bad", print, inputs=Input(res, "block", 2, max_age_s=0.1))
    with pytest.raises(GraphError, match="max_age_s must be a positive number"):
        p.sink("bad2", print, inputs=cam, policy="latest", max_age_s=-1)


class Chatty:
    priority = "low"

    def process(self, item: int) -> int:
        return item


def test_priorities_default_by_role_and_may_be_declared() -> None:
    p = Pipeline("p")
    cam = p.source("cam", [1])
    lm = p.stage("lm", Chatty(), inputs=cam)
    p.stage("det", lambda x: x, inputs=cam)
    p.sink("rec", print, inputs=lm, priority="high")
    graph = p.validate()
    assert graph.node("cam").priority is Priority.HIGH
    assert graph.node("lm").priority is Priority.LOW  # what its class declares
    assert graph.node("det").priority is Priority.NORMAL
    assert graph.node("rec").priority is Priority.HIGH
    with pytest.raises(GraphError, match="unknown priority"):
        p.sink("x", print, inputs=cam, priority="urgent")


def test_headroom_is_checked() -> None:
    assert Pipeline("p", headroom=0.25).headroom == 0.25
    with pytest.raises(GraphError, match="headroom"):
        Pipeline("p", headroom=1.0)


def test_full_latest_lanes_are_served_in_turn_whatever_their_phase() -> None:
    # Four cameras into one detector through size-1 latest lanes; cam3's frames always arrive
    # last. Served by arrival alone, the detector (slower than the cameras) would pick the
    # lane with the oldest frame, the same camera each time.
    inbox = Inbox("faces")
    lanes = [inbox.add(f"cam{i}", 1, "latest") for i in range(4)]
    served: list[str] = []
    seq = 0
    for _ in range(40):
        for _ in range(3):  # three frame times pass during each model run
            for lane in lanes:
                seq += 1
                lane.offer(Frame(seq, 0))
        assert inbox.get_nowait() is not EMPTY
        served.append(inbox.lane)
    assert {name: served.count(name) for name in sorted(set(served))} == {f"cam{i}": 10 for i in range(4)}


@dataclass
class Stamped:
    seq: int
    t_decoded_ns: int


@pytest.mark.slow
def test_max_age_applies_on_a_single_lane_stage_too() -> None:
    async def camera():  # type: ignore[no-untyped-def]
        for i in range(5):
            yield Stamped(i, time.monotonic_ns())
            await asyncio.sleep(0.01)
            yield Stamped(100 + i, time.monotonic_ns() - 10**10)  # queued while the stage is busy; 10 s old
            await asyncio.sleep(0.1)

    def slow(x: Stamped) -> Stamped:
        time.sleep(0.05)
        return x

    sink: ListSink[Stamped] = ListSink()
    p = Pipeline("age")
    st = p.stage("st", slow, inputs=p.source("cam", camera), policy="latest", queue_size=4, max_age_s=1.0,
                 on_loop=False)  # fmt: skip
    p.sink("out", sink, inputs=st)
    run_pipeline(p, RunConfig(governed=False))
    assert [f.seq for f in sink.items if f.seq >= 100] == []
