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
