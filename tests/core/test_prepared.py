"""Two-step stages: prepare() of the next item overlaps process() of the last, two deep."""

from __future__ import annotations

import threading
import time

import pytest

from edgepipe import NodeError, Pipeline
from edgepipe.core.lease import Leased
from edgepipe.core.types import declared_types
from edgepipe.testing import FakeSource, ListSink, run_pipeline


class Item(Leased):
    def __init__(self, n: int, freed: list[int]) -> None:
        super().__init__()
        self.n = n
        self.freed = freed

    def _free(self) -> None:
        self.freed.append(self.n)


class Ready(Leased):
    """What prepare() makes: holds its input's lease until processed."""

    def __init__(self, item: Item, freed: list[str]) -> None:
        super().__init__()
        item.retain()
        self.item = item
        self.freed = freed

    def _free(self) -> None:
        self.freed.append(f"ready{self.item.n}")
        self.item.release()


class TwoStep:
    def __init__(self, step_s: float = 0.03, fail_prepare: int = -1, fail_process: int = -1) -> None:
        self.step_s = step_s
        self.fail_prepare = fail_prepare
        self.fail_process = fail_process
        self.processing = threading.Event()
        self.overlapped = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.ready_freed: list[str] = []

    def prepare(self, item: Item) -> Ready:
        if item.n == self.fail_prepare:
            raise RuntimeError(f"prepare failed on {item.n}")
        if self.processing.is_set():
            self.overlapped += 1
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        time.sleep(self.step_s)
        return Ready(item, self.ready_freed)

    def process(self, ready: Ready) -> int:
        self.processing.set()
        try:
            time.sleep(self.step_s)
            if ready.item.n == self.fail_process:
                raise RuntimeError(f"process failed on {ready.item.n}")
            return ready.item.n * 10
        finally:
            self.processing.clear()
            with self.lock:
                self.in_flight -= 1


def run_two_step(stage: TwoStep, count: int = 8, policy: str = "block", on_error: str = "skip"):  # type: ignore[no-untyped-def]
    freed: list[int] = []
    sink: ListSink[int] = ListSink()
    p = Pipeline("t")
    src = p.source("items", FakeSource([Item(i, freed) for i in range(count)]))
    p.sink(
        "out", sink, inputs=p.stage("two", stage, inputs=src, policy=policy, queue_size=8, on_error=on_error)
    )
    report = run_pipeline(p)
    return sink.items, freed, report


def test_prepare_overlaps_process_in_order_and_two_deep() -> None:
    stage = TwoStep()
    out, freed, report = run_two_step(stage)
    assert out == [n * 10 for n in range(8)]
    assert stage.overlapped >= 4  # most prepares ran while the previous item was processed
    assert stage.max_in_flight <= 2  # one being prepared, one being processed: no deeper
    assert sorted(freed) == list(range(8))  # every input's lease came back
    assert len(stage.ready_freed) == 8
    assert report.stats.node("two").items_in == 8


def test_a_latest_inbox_keeps_the_steps_back_to_back() -> None:
    stage = TwoStep(step_s=0.005)
    out, freed, _ = run_two_step(stage, count=5, policy="latest")
    assert stage.overlapped == 0
    assert out  # latest may drop; whatever went through came out
    assert sorted(freed) == list(range(5))
    assert len(stage.ready_freed) == len(out)


def test_failures_in_either_step_skip_that_item_and_free_it() -> None:
    stage = TwoStep(step_s=0.005, fail_prepare=2, fail_process=5)
    out, freed, report = run_two_step(stage)
    assert out == [0, 10, 30, 40, 60, 70]
    assert report.stats.node("two").errors == 2
    assert sorted(freed) == list(range(8))


def test_stop_policy_stops_the_run_with_the_nodes_error() -> None:
    with pytest.raises(NodeError, match=r"node 'two'.*process failed on 3"):
        run_two_step(TwoStep(step_s=0.005, fail_process=3), on_error="stop")


def test_the_item_type_is_what_prepare_takes() -> None:
    assert declared_types(TwoStep(), "stage") == (Item, int)


def test_late_results_of_abandoned_calls_are_released() -> None:
    # prepare() of item 1 runs past the node's deadline: it is abandoned, and the Ready it
    # returns later (holding item 1's lease) must be let go; so must a late process() output.
    class Late(TwoStep):
        def prepare(self, item: Item) -> Ready:
            if item.n == 1:
                time.sleep(0.3)
            return Ready(item, self.ready_freed)

        def process(self, ready: Ready) -> Ready:  # type: ignore[override]
            if ready.item.n == 2:
                time.sleep(0.3)
            return Ready(ready.item, self.ready_freed)

    freed: list[int] = []
    p = Pipeline("t")
    src = p.source("items", FakeSource([Item(i, freed) for i in range(4)]))
    p.sink("out", ListSink(), inputs=p.stage("two", Late(step_s=0.0), inputs=src, timeout_s=0.1))
    report = run_pipeline(p)
    assert report.stats.node("two").errors == 2
    deadline = time.monotonic() + 3
    while sorted(freed) != list(range(4)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(freed) == list(range(4))
