"""Micro-batching: process_batch() gets the items already waiting, never waits for more."""

from __future__ import annotations

import threading
import time

from edgepipe import Pipeline
from edgepipe.core.lease import Leased
from edgepipe.graph.spec import ErrorPolicy, OnError
from edgepipe.runner import RunConfig, run_async
from edgepipe.testing import FakeSource, ListSink, run_pipeline


class Item(Leased):
    def __init__(self, n: int, freed: list[int]) -> None:
        super().__init__()
        self.n = n
        self.freed = freed

    def _free(self) -> None:
        self.freed.append(self.n)


class Batcher:
    def __init__(self, batch_size: int = 4, delay_s: float = 0.02, fail_on: int = -1) -> None:
        self.batch_size = batch_size
        self.delay_s = delay_s
        self.fail_on = fail_on
        self.sizes: list[int] = []

    def process(self, item: Item) -> int:  # the one-by-one form, unused when batching
        raise AssertionError("process() called although process_batch() exists")

    def process_batch(self, items: list[Item]) -> list[int | None]:
        self.sizes.append(len(items))
        time.sleep(self.delay_s)
        if any(i.n == self.fail_on for i in items):
            raise RuntimeError(f"batch with {self.fail_on} failed")
        return [None if i.n % 5 == 4 else i.n for i in items]


def run_batcher(batcher: Batcher, count: int = 20, timeout_s: float | None = None):  # type: ignore[no-untyped-def]
    freed: list[int] = []
    sink: ListSink[int] = ListSink()
    p = Pipeline("t")
    src = p.source("items", FakeSource([Item(i, freed) for i in range(count)]))
    p.sink("out", sink, inputs=p.stage("batch", batcher, inputs=src, queue_size=8, timeout_s=timeout_s))
    report = run_pipeline(p, RunConfig(governed=False))
    return sink.items, freed, report


def test_waiting_items_go_together_in_order() -> None:
    batcher = Batcher()
    out, freed, report = run_batcher(batcher)
    assert out == [n for n in range(20) if n % 5 != 4]  # None means no output for that item
    assert max(batcher.sizes) == 4
    assert sum(batcher.sizes) == 20
    assert sorted(freed) == list(range(20))
    assert report.stats.node("batch").items_in == 20


def test_a_lone_item_is_not_held_back_for_a_batch() -> None:
    seen: list[float] = []

    class Clock(Batcher):
        def process_batch(self, items: list[Item]) -> list[int | None]:
            seen.append(time.monotonic())
            return super().process_batch(items)

    batcher = Clock(delay_s=0.0)
    freed: list[int] = []
    p = Pipeline("t")
    src = p.source("items", FakeSource([Item(i, freed) for i in range(3)], interval_s=0.05))
    p.sink("out", ListSink(), inputs=p.stage("batch", batcher, inputs=src))
    run_pipeline(p, RunConfig(governed=False))
    assert batcher.sizes == [1, 1, 1]


def test_a_failed_batch_counts_once_and_frees_its_items() -> None:
    batcher = Batcher(fail_on=6)
    out, freed, report = run_batcher(batcher)
    assert 6 not in out
    assert report.stats.node("batch").errors == 1
    assert sorted(freed) == list(range(20))


def test_an_abandoned_batch_keeps_its_items_until_its_thread_ends() -> None:
    release = threading.Event()

    class Stuck(Batcher):
        def process_batch(self, items: list[Item]) -> list[int | None]:
            if items[0].n == 0:
                release.wait(5)
                assert all(i.refs > 0 for i in items)  # still leased to this thread
            return super().process_batch(items)

    freed: list[int] = []
    sink: ListSink[int] = ListSink()
    p = Pipeline("t")
    src = p.source("items", FakeSource([Item(i, freed) for i in range(4)], interval_s=0.01))
    p.sink("out", sink, inputs=p.stage("batch", Stuck(delay_s=0.0), inputs=src, timeout_s=0.2))
    report = run_pipeline(p, RunConfig(governed=False))
    assert report.stats.node("batch").errors == 1
    assert 0 not in freed  # the abandoned call still holds item 0
    release.set()
    deadline = time.monotonic() + 5
    while 0 not in freed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 0 in freed


def test_a_prepare_failure_inside_a_batch_frees_what_was_prepared() -> None:
    class Ready(Leased):
        def __init__(self, item: Item) -> None:
            super().__init__()
            item.retain()
            self.item = item

        def _free(self) -> None:
            self.item.release()

    class PrepareThenBatch(Batcher):
        def prepare(self, item: Item) -> Ready:
            if item.n == 2:
                raise ValueError("a frame that cannot be prepared")
            return Ready(item)

        def process_batch(self, items: list[Ready]) -> list[int | None]:  # type: ignore[override]
            time.sleep(0.01)
            return [r.item.n for r in items]

    out, freed, report = run_batcher(PrepareThenBatch(), count=8)
    assert 2 not in out
    assert report.stats.node("batch").errors == 1
    assert sorted(freed) == list(range(8))


async def test_an_open_circuit_counts_every_item_of_a_skipped_batch() -> None:
    class Broken:
        batch_size = 4

        def process(self, item: int) -> int:
            return item

        def process_batch(self, items: list[int]) -> list[int]:
            raise RuntimeError("broken")

    p = Pipeline()
    src = p.source("src", FakeSource(range(400)))
    policy = ErrorPolicy(OnError.SKIP, open_after=1, cooldown_s=60)
    p.sink("out", ListSink(), inputs=p.stage("b", Broken(), inputs=src, on_error=policy, queue_size=16))
    stats = (await run_async(p, RunConfig(governed=False))).stats.node("b")
    assert stats.errors == 1
    assert stats.items_in == 400
    assert stats.items_in - stats.skipped <= 4  # only the failed batch was called
