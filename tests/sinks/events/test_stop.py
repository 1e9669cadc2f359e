"""SIGTERM or SIGHUP during a recording, in a real ``edgepipe run``: the clip is finished
(playable from a keyframe, under its final name) or removed; nothing half-written is left, and
the results hold one closing message for each clip that started."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import av
import pytest

from tests.support.stopping import REPO, start

pytestmark = pytest.mark.slow

PIPELINE = REPO / "tests" / "sinks" / "paint_events.py"


@pytest.mark.parametrize(
    ("signum", "after_s", "kept"), [(signal.SIGTERM, 0.3, False), (signal.SIGHUP, 1.5, True)]
)
def test_a_stop_during_a_recording_leaves_a_playable_clip_or_none(
    tmp_path: Path, signum: signal.Signals, after_s: float, kept: bool
) -> None:
    """``kept``: 1.5 s into the recording (plus its pre-roll) there are frames to keep, and the
    stop has the time to finish the clip: it must be there (early on, none is acceptable)."""
    events, results = tmp_path / "events", tmp_path / "results.jsonl"
    run = start([str(PIPELINE), "--events-dir", str(events), "--trigger-at", "20", "--post-s", "60",
                 "--results", str(results)])  # fmt: skip
    run.wait_for("recording ")  # the clip is being written
    time.sleep(after_s)
    t0 = time.monotonic()
    run.proc.send_signal(signum)  # SIGHUP: what a closing ssh session sends
    ended = run.ended(t0)
    assert ended.code == 0, ended
    names = [p.name for p in events.iterdir()]
    assert not [n for n in names if not n.endswith(".mp4") or n.startswith(".")], ended
    assert len(names) <= 1
    for name in names:
        with av.open(str(events / name)) as container:
            frames = list(container.decode(video=0))
        assert frames
        assert frames[0].key_frame
    assert "saved" in ended.stderr or not names
    if kept:
        assert len(names) == 1, ended
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    states = [m["data"]["state"] for m in lines if m["kind"] == "event" and m["node"] == "events"]
    assert states in (["start", "end"], ["start", "removed"]), states
    assert (states[1] == "end") == bool(names)
