from __future__ import annotations

from edgepipe.runtime.engine import Snapshot
from edgepipe.runtime.metrics import NodeStats
from edgepipe.serve.health import ProgressTracker


def _source(items_out: int, state: str = "running", **gauges: object) -> NodeStats:
    return NodeStats(
        "cam", "source", 0, items_out, 0, 0, 0, None, None, None, 0.0, 0.0, 0.0, state, dict(gauges)
    )


def _snap(node: NodeStats) -> Snapshot:
    return Snapshot(t_s=1.0, nodes=(node,), channels=())


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_source_is_healthy_while_it_produces_within_the_limit() -> None:
    clock = Clock()
    tracker = ProgressTracker(5.0, clock)
    ok, body = tracker.verdict(_snap(_source(0)))
    assert not ok
    assert body["reasons"] == ["cam: no items yet (0.0 s since start)"]
    clock.now += 1
    assert tracker.verdict(_snap(_source(3, source="live")))[0]
    clock.now += 4.9
    tracker.sample(_snap(_source(3, source="live")))
    assert tracker.verdict(_snap(_source(3, source="live")))[0]
    clock.now += 0.2
    ok, body = tracker.verdict(_snap(_source(3, source="live")))
    assert not ok
    assert body["reasons"] == ["cam: stalled: no items for 5.1 s"]
    assert body["sources"]["cam"]["last_item_s_ago"] == 5.1
    assert tracker.verdict(_snap(_source(4, source="live")))[0]


def test_states_that_are_not_live_fail_with_their_name() -> None:
    tracker = ProgressTracker(5.0, Clock())
    tracker.sample(_snap(_source(1)))
    assert tracker.verdict(_snap(_source(2, source="stalled")))[1]["reasons"] == ["cam: stalled"]
    assert tracker.verdict(_snap(_source(3, "done")))[1]["reasons"] == ["cam: stopped (done)"]
    assert tracker.verdict(_snap(_source(4)), stopping=True)[1]["reasons"] == ["cam: stopping"]
    ok, body = tracker.verdict(Snapshot(t_s=1.0, nodes=(), channels=()))
    assert not ok
    assert body["reasons"] == ["the pipeline has no source"]


def test_a_remote_engines_circuit_is_shown_beside_the_sources_and_judges_nothing() -> None:
    describe = NodeStats("describe", "stage", 0, 0, 0, 0, 0, None, None, None, 0.0, 0.0, 0.0, "running",
                         {"engine": "open", "engine_cause": "refused", "engine_slots": 1, "fallbacks": 3,
                          "skipped": 0, "model": "x"})  # fmt: skip
    tracker = ProgressTracker(5.0, Clock())
    tracker.sample(_snap(_source(1, source="live")))
    ok, body = tracker.verdict(Snapshot(t_s=1.0, nodes=(_source(2, source="live"), describe), channels=()))
    assert ok
    assert body["engines"] == {"describe": {"state": "open", "cause": "refused", "slots": 1, "fallbacks": 3,
                                            "skipped": 0}}  # fmt: skip
