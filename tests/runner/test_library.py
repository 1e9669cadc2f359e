"""``edgepipe.run()`` does what ``edgepipe run`` does: the governor, the memory plan and the
heartbeat, from Python (the command's side: tests/cli/test_run_options.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import edgepipe
from edgepipe import Pipeline, load_pipeline
from edgepipe.runner import RunConfig
from edgepipe.testing import FakeSource, ListSink

REPO = Path(__file__).resolve().parents[2]


def test_a_pipeline_s_own_headroom_governs_its_run_from_python() -> None:
    p = Pipeline("t", headroom=0.25)
    sink: ListSink[int] = ListSink()
    p.sink("out", sink, inputs=p.source("items", FakeSource([1, 2, 3])))
    report = edgepipe.run(p)
    assert sink.items == [1, 2, 3]
    sched = report.stats.sched
    assert sched is not None, "ungoverned: Pipeline(headroom=...) did nothing"
    assert sched["governed"]
    assert sched["target"] == pytest.approx(0.75)
    assert (edgepipe.run(p, RunConfig(headroom=0)).stats.sched or {})["governed"] is False
    with pytest.raises(ValueError, match="headroom"):
        edgepipe.run(p, RunConfig(headroom=1.5))


@pytest.mark.slow
def test_the_demo_run_from_python_shows_the_governor_the_memory_plan_and_the_heartbeat(
    tmp_path: Path,
) -> None:
    health = tmp_path / "health.json"
    pipeline = load_pipeline(REPO / "pipelines" / "demo.py", ["--detect", "none"])
    report = edgepipe.run(pipeline, RunConfig(health_file=str(health), headroom=0.5, duration_s=2.0))
    assert report.stopped_by == "stop"
    sched = report.stats.sched
    assert sched is not None
    assert sched["governed"]
    assert sched["target"] == pytest.approx(0.5)
    assert {k["node"] for k in sched["knobs"]} == {"motion", "view"}  # the governor's ladder
    memory = report.stats.memory
    assert memory is not None
    assert memory["total_bytes"] > 0
    assert [r["what"] for r in memory["reservations"]] == ["frame pool (5 x 640x480)"]
    beat = json.loads(health.read_text())
    assert beat["stopped"]
    assert beat["items_out"] > 0
    assert beat["sched"]["governed"]
    assert beat["sched"]["target"] == pytest.approx(0.5)
    assert beat["memory"]["total_bytes"] == memory["total_bytes"]


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_runs_on_both_loops(loop: str) -> None:
    seen_loop: list[str] = []

    async def note_loop(x: int) -> int:
        seen_loop.append(type(asyncio.get_running_loop()).__module__)
        return x

    out: ListSink[int] = ListSink()
    p = Pipeline()
    src = p.source("src", FakeSource(range(3)))
    p.sink("out", out, inputs=p.stage("s", note_loop, inputs=src))
    edgepipe.run(p, RunConfig(governed=False, loop=loop))
    assert out.items == [0, 1, 2]
    assert seen_loop[0].startswith(loop)
