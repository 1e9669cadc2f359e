"""EventRecorder end to end: the real encoder and muxer, a synthetic camera or a generated clip,
clips read back with PyAV. (Units: test_ring.py, test_trigger.py, test_retention.py, test_encode.py;
SIGTERM in a real ``edgepipe run``: test_events_stop.py.)"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from edgepipe import Pipeline
from edgepipe.core.errors import NodeError
from edgepipe.media import VideoSource
from edgepipe.media.frame import Frame, from_rgb
from edgepipe.media.status import SourceStatus
from edgepipe.runner import RunConfig, run_async
from edgepipe.sinks.events.recorder import EventRecorder
from edgepipe.sinks.events.trigger import Trigger
from tests.sinks.paint_events import Events, pipeline

TICKS = 90_000
FRAME_S = 1 / 15  # the synthetic camera's frame time


def _events(p: Pipeline) -> list[dict[str, Any]]:
    sink = next(n for n in p.nodes if n.node_id == "log").target
    assert isinstance(sink, Events)
    return sink.messages


def _decode(path: Path) -> tuple[list[Any], Fraction]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return list(container.decode(stream)), stream.time_base


@pytest.mark.slow
async def test_a_clip_triggered_mid_stream_plays_from_a_keyframe_and_holds_pre_and_post_roll(
    tmp_path: Path,
) -> None:
    p = pipeline(str(tmp_path / "events"), trigger_at=45, pre_s=1.0, post_s=1.0)
    await run_async(
        p, RunConfig(governed=False, duration_s=5.0)
    )  # the trigger at 3 s, the post-roll's end at 4 s
    start, end = _events(p)
    assert (start["state"], end["state"], end["ended_by"]) == ("start", "end", "post_roll")
    assert end["trigger"] == {"kind": "event", "reason": "frame 45", "source": "camera"}
    path = Path(end["path"])
    assert [f.name for f in path.parent.iterdir()] == [path.name]  # nothing else: no temporary file
    frames, _ = _decode(path)
    assert len(frames) == end["frames"]
    assert frames[0].key_frame
    assert frames[0].time == 0.0
    # The pre-roll: from the latest keyframe at or before trigger - pre_s (one a second).
    pre_s = (end["trigger_pts"] - end["start_pts"]) / TICKS
    assert 1.0 <= pre_s <= 1.0 + 1.0 + FRAME_S
    # The post-roll: frames until post_s after the (last) trigger.
    post_s = (end["end_pts"] - end["last_trigger_pts"]) / TICKS
    assert 1.0 - 2 * FRAME_S <= post_s <= 1.0 + FRAME_S
    assert frames[-1].time == pytest.approx((end["end_pts"] - end["start_pts"]) / TICKS, abs=0.002)
    assert end["start_t"] < end["end_t"]
    # Every frame in the clip is an output frame of the pipeline (top half painted black).
    for frame in frames:
        y = frame.to_ndarray(format="gray")
        assert y[: y.shape[0] // 2 - 8].mean() < 24
        assert y[y.shape[0] // 2 + 8 :].mean() > 48  # the synthetic scene: not black


@pytest.mark.slow
async def test_a_trigger_storm_extends_clips_up_to_their_longest(tmp_path: Path) -> None:
    # A trigger every 3 frames (0.2 s) from frame 15 to the end of the run: one clip at a time,
    # each extended, cut at max_clip_s on a keyframe, the next carrying on from there.
    p = pipeline(str(tmp_path / "events"), trigger_at=15, every=3, pre_s=0.5, post_s=1.0, max_clip_s=3.0)
    await run_async(
        p, RunConfig(governed=False, duration_s=5.0)
    )  # ~20 triggers: one clip cut at 3 s, the next carrying on
    ends = [m for m in _events(p) if m["state"] == "end"]
    assert 2 <= len(ends) == len(list((tmp_path / "events").iterdir())) <= 3
    assert sum(m["triggers"] for m in ends) >= 15
    assert [m["ended_by"] for m in ends[:-1]] == ["max_length"] * (len(ends) - 1)
    for before, after in itertools.pairwise(ends):
        gap_s = (after["start_pts"] - before["end_pts"]) / TICKS
        assert 0 < gap_s <= 1.5 * FRAME_S  # contiguous: neither a gap nor an overlap
    for m in ends:
        assert m["duration_s"] <= 3.0
        frames, _ = _decode(Path(m["path"]))
        assert frames[0].key_frame
        assert len(frames) == m["frames"]


async def test_the_end_of_the_input_finishes_the_clip(make_clip: Any, tmp_path: Path) -> None:
    clip = make_clip("ends.mp4", width=320, height=240, fps=30, seconds=2)
    p = pipeline(str(tmp_path / "events"), source=str(clip), trigger_at=40, pre_s=0.5, post_s=30.0)
    await run_async(p, RunConfig(governed=False))
    _start, end = _events(p)
    assert end["ended_by"] == "ended"
    frames, _ = _decode(Path(end["path"]))
    assert frames[0].key_frame
    assert len(frames) == end["frames"]
    assert frames[-1].time == pytest.approx(end["duration_s"], abs=0.002)
    # The file's own timing (30 fps), not the speed it was processed at.
    assert end["duration_s"] == pytest.approx((59 - end["start_pts"] / TICKS * 30) / 30, abs=0.04)


class _Camera:
    """A source that stalls: frames for ``frames`` frames, then ``stalled`` and no more. Its
    ``status`` reaches the recorder through the graph (the node's context), as a VideoSource's."""

    def __init__(self, frames: int) -> None:
        self.frames = frames
        self.status = SourceStatus("cam")
        self.status.set_state("live")
        rgb = np.full((240, 320, 3), 120, np.uint8)
        self._picture = rgb

    async def __call__(self) -> AsyncIterator[Frame]:
        for seq in range(self.frames):
            await asyncio.sleep(FRAME_S)
            yield from_rgb(self._picture, source_id="cam", seq=seq)
        self.status.set_state("stalled", "no frame for 5 s")
        await asyncio.sleep(3600)


@pytest.mark.slow
async def test_a_source_state_triggers_and_a_lost_source_finishes_the_clip(tmp_path: Path) -> None:
    camera = _Camera(frames=45)
    recorder = EventRecorder(tmp_path / "events", trigger=Trigger(events=False), pre_s=1.0, post_s=10.0,
                             lost_after_s=0.5)  # fmt: skip
    events = Events()
    p = Pipeline()
    frames = p.source("cam", camera)
    p.sink("log", events, inputs=p.stage("events", recorder, inputs=frames))
    t0 = time.monotonic()
    await run_async(
        p, RunConfig(governed=False, duration_s=4.5)
    )  # frames for 3 s, lost 0.5 s after they stop
    assert time.monotonic() - t0 >= 4.0  # the source never ended: the clip was finished while it ran
    start, end = events.messages
    assert start["trigger"] == {
        "kind": "source_state",
        "reason": "cam stalled: no frame for 5 s",
        "source": "cam",
    }
    assert end["ended_by"] == "source_lost"
    frames_read, _ = _decode(Path(end["path"]))
    assert frames_read[0].key_frame
    assert len(frames_read) == end["frames"] >= 15  # the second before the stall


@pytest.mark.slow
async def test_no_trigger_no_clip(tmp_path: Path) -> None:
    p = pipeline(str(tmp_path / "events"), trigger_at=10_000)
    await run_async(p, RunConfig(governed=False, duration_s=2.0))
    assert _events(p) == []
    assert list((tmp_path / "events").iterdir()) == []


def test_a_folder_that_cannot_be_used_is_refused_at_declaration(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for where, message in (("no/events", "in an existing folder"), ("file", "not a file")):
        with pytest.raises(ValueError, match=f"EventRecorder events_dir: expected a folder path.*{message}"):
            EventRecorder(tmp_path / where)
    assert not (tmp_path / "no").exists()


async def test_a_folder_gone_between_declaration_and_start_is_refused_at_start(tmp_path: Path) -> None:
    p = Pipeline()
    recorder = EventRecorder(tmp_path / "events")
    (tmp_path / "events").write_text("not a folder any more")
    p.sink(
        "log",
        Events(),
        inputs=p.stage("events", recorder, inputs=p.source("cam", VideoSource("synthetic://64x48@5"))),
    )
    with pytest.raises(
        NodeError, match=r"start\(\) failed: OutputError: .*event clips: expected a folder path, not a file"
    ):
        await run_async(p, RunConfig(governed=False, duration_s=1.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pre_s": -1}, "pre_s must be"),
        ({"post_s": float("nan")}, "post_s must be"),
        ({"max_clip_s": 2, "pre_s": 5}, "max_clip_s .* must be longer than pre_s"),
        ({"max_bytes": 0}, "max_bytes must be a positive number of bytes"),
        ({"max_age_s": 0}, "max_age_s must be"),
        ({"crf": 60}, "crf must be an integer"),
    ],
)
def test_settings_that_cannot_be_right_are_refused(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        EventRecorder(tmp_path, **kwargs)
