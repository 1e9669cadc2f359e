"""Two-step stages: prepare() of the next item overlaps process() of the last, two deep."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from edgepipe import NodeError, Pipeline
from edgepipe.core import prepared
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
    def __init__(
        self,
        step_s: float = 0.03,
        fail_prepare: int = -1,
        fail_process: int = -1,
        *,
        prepare_s: float | None = None,
        process_s: float | None = None,
    ) -> None:
        self.prepare_s = step_s if prepare_s is None else prepare_s
        self.process_s = step_s if process_s is None else process_s
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
        time.sleep(self.prepare_s)
        return Ready(item, self.ready_freed)

    def process(self, ready: Ready) -> int:
        self.processing.set()
        try:
            time.sleep(self.process_s)
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


def run_live(stage: TwoStep, count: int, interval_s: float):  # type: ignore[no-untyped-def]
    """A source of ``count`` items ``interval_s`` apart into a latest/1 lane of ``stage``."""
    freed: list[int] = []
    sink: ListSink[int] = ListSink()
    p = Pipeline("t")
    src = p.source("items", FakeSource([Item(i, freed) for i in range(count)], interval_s=interval_s))
    p.sink("out", sink, inputs=p.stage("two", stage, inputs=src, policy="latest", queue_size=1))
    report = run_pipeline(p)
    return sink.items, freed, report


def test_a_latest_inbox_overlaps_too_and_the_model_never_waits() -> None:
    # Items every 5 ms, preparing takes 10 ms and processing 40 ms: the newest item is prepared
    # while the model runs, so the model goes back to back: about 40 ms a result, not 50.
    stage = TwoStep(prepare_s=0.010, process_s=0.040)
    t0 = time.monotonic()
    out, freed, report = run_live(stage, count=150, interval_s=0.005)
    elapsed = time.monotonic() - t0
    assert stage.overlapped >= len(out) // 2  # prepared while the last one was processed
    assert stage.max_in_flight <= 2
    assert out == sorted(out)  # newest first, never out of order
    assert len(out) >= 5
    # Back to back, the steps would give one result per 50 ms at best.
    assert len(out) > elapsed / 0.050
    assert sorted(freed) == list(range(150))  # every input's lease came back, dropped or not
    assert len(stage.ready_freed) == len(out) + report.stats.node("two").replaced


def test_a_newer_item_replaces_the_prepared_one_while_there_is_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # The preparer starts about one preparation before the model is expected to finish; with a
    # long lead (50 ms here), items that arrive meanwhile replace the prepared one (counted)
    # while there is still time to prepare them, so the model gets the newest.
    monkeypatch.setattr(prepared, "_LEAD_NS", 50_000_000)
    stage = TwoStep(prepare_s=0.002, process_s=0.100)
    out, freed, report = run_live(stage, count=160, interval_s=0.005)
    stats = report.stats.node("two")
    assert stats.replaced > 0
    assert sorted(freed) == list(range(160))
    assert len(stage.ready_freed) == len(out) + stats.replaced
    # Results ~20 items apart (100 ms / 5 ms): each of the newest, not of one 50 ms older.
    gaps = [b - a for a, b in itertools.pairwise(out[1:])]
    assert len(gaps) >= 3
    assert min(gaps) >= 14


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
