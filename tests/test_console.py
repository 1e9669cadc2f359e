"""The --stats table: one row per node, its inbox's lanes summed by policy."""

from __future__ import annotations

from rich.console import Console

from edgepipe import Pipeline, run
from edgepipe.console import stats_table
from edgepipe.testing import FakeSource, ListSink


def test_a_node_with_lanes_of_two_policies_shows_each_policy_once() -> None:
    p = Pipeline()
    a = p.source("a", FakeSource([1, 2]))
    b = p.source("b", FakeSource([3]))
    c = p.source("c", FakeSource([4]))
    p.sink("out", ListSink(), inputs={"frames": (a, "latest", 1), "x": (b, "block", 4), "y": (c, "block", 4)})
    report = run(p)
    console = Console(width=200, record=True)
    console.print(stats_table(report.stats, "t"))
    row = next(line for line in console.export_text().splitlines() if "│ out" in line)
    assert "0/1 latest 0/8 block" in row
    assert report.stats.node("out").items_in + sum(c.dropped for c in report.stats.inbox("out")) == 4
