from __future__ import annotations

from edgepipe.runtime.metrics import WINDOW, NodeMetrics


def test_percentiles_over_the_recent_window() -> None:
    m = NodeMetrics("n", "stage")
    assert m.percentiles_ms() == (None, None, None)
    for ms in range(1, 101):
        m.record(ms * 1_000_000)
    p50, p95, p99 = m.percentiles_ms()
    assert (p50, p95, p99) == (51.0, 96.0, 100.0)
    for _ in range(WINDOW):  # old samples age out of the window
        m.record(2_000_000)
    assert m.percentiles_ms() == (2.0, 2.0, 2.0)


def test_snapshot_busy_fraction_and_state() -> None:
    m = NodeMetrics("n", "stage")
    m.started()
    m.record(1_000)
    m.finished()
    snap = m.snapshot()
    assert snap.state == "done"
    assert 0 < snap.busy_frac <= 1
    assert snap.node_id == "n"
    assert snap.kind == "stage"


def test_light_items_are_counted_apart_from_the_calls_with_their_own_percentiles() -> None:
    # A detector with every=3: its model runs are the calls, its carried frames light items.
    m = NodeMetrics("faces", "stage")
    for _ in range(10):
        m.record(100_000_000)  # a model run, 100 ms
    for _ in range(20):
        m.record_light(50_000)  # the tracker's step, 0.05 ms
    snap = m.snapshot()
    assert (snap.calls, snap.light) == (10, 20)
    assert snap.latency_p50_ms == snap.latency_p95_ms == 100.0  # the runs' alone
    assert (snap.light_p50_ms, snap.light_p95_ms) == (0.05, 0.05)
    assert snap.busy_s == 1.0  # light items' busy time is their caller's to count
