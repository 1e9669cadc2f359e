from __future__ import annotations

import socket
from pathlib import Path

import pytest

from edgepipe import Pipeline
from edgepipe.media import FrameSize, VideoSource, parse
from edgepipe.media.errors import SourceError
from edgepipe.media.reservations import pool_capacity, probe_frame_size
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runner import RunConfig
from edgepipe.runtime.memory_plan import PlanNode, plan_graph
from edgepipe.testing import ListSink, run_pipeline


def test_the_pool_holds_what_the_consumers_hold_plus_the_one_being_decoded() -> None:
    assert pool_capacity(None, ()) == 3  # outside a pipeline: as if one consumer held two
    assert pool_capacity(None, (2, 3)) == 6
    assert pool_capacity(4, (2, 3)) == 4  # asked for


def test_the_frame_size_comes_from_the_url_or_the_opened_input(clip: Path) -> None:
    assert probe_frame_size(parse("synthetic://320x240@5"), timeout_s=1.0) == FrameSize(320, 240)
    assert probe_frame_size(parse(str(clip)), timeout_s=5.0) == FrameSize(320, 240)
    with pytest.raises(SourceError, match="no such file"):
        probe_frame_size(parse("/nonexistent/clip.mp4"), timeout_s=1.0)


def _camera_pipeline(source: VideoSource) -> Pipeline:
    p = Pipeline("t")
    p.sink("out", ListSink(), inputs=p.source("camera", source), policy="latest", queue_size=1)
    return p


@pytest.mark.parametrize("url", ["synthetic://320x240@30", "clip"])
@pytest.mark.slow
def test_the_plan_reserves_the_pool_the_running_source_reserves(
    url: str, clip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(clip) if url == "clip" else url
    planned = plan_graph(_camera_pipeline(VideoSource(url)).validate(), MemoryPlan(limit_bytes=1 << 30))
    process_plan = MemoryPlan(limit_bytes=1 << 30)
    monkeypatch.setattr(memory, "_PLAN", process_plan)
    source = VideoSource(url)  # kept: its pool's reservation lives as long as the pool
    run_pipeline(_camera_pipeline(source), RunConfig(governed=False, duration_s=0.5))
    reserved = [(r.owner, r.what, r.nbytes) for r in process_plan.entries()]
    assert reserved == [("camera", "frame pool (3 x 320x240)", 3 * 320 * 240 * 3 // 2)]
    assert [(r.owner, r.what, r.nbytes) for r in planned.entries] == reserved
    assert planned.unknowns == ()


def test_an_input_that_cannot_be_opened_is_an_unknown_size_not_a_failure() -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for url, why in [
        ("/nonexistent/clip.mp4", "cannot open /nonexistent/clip.mp4: no such file"),
        (f"rtsp://127.0.0.1:{port}/cam", f"cannot open rtsp://127.0.0.1:{port}/cam: "),
    ]:
        node = PlanNode("camera", (2,), {})
        plan = MemoryPlan(limit_bytes=1 << 30)
        assert VideoSource(url, timeout_s=2.0).plan_memory(plan, node) is None
        assert plan.entries() == []
        [unknown] = node.unknowns
        assert (unknown.owner, unknown.what) == ("camera", "frame pool (3 frames)")
        assert unknown.why.startswith(why)
