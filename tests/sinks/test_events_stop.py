"""SIGTERM during a recording, in a real ``edgepipe run``: the clip is finished (playable from a
keyframe, under its final name) or removed; nothing half-written is left."""

from __future__ import annotations

from pathlib import Path

import av
import pytest

from tests.stopping import REPO, start

pytestmark = pytest.mark.slow

PIPELINE = REPO / "tests" / "sinks" / "paint_events.py"


@pytest.mark.parametrize(("after_s", "kept"), [(0.3, False), (1.5, True)])
def test_sigterm_during_a_recording_leaves_a_playable_clip_or_none(
    tmp_path: Path, after_s: float, kept: bool
) -> None:
    """``kept``: 1.5 s into the recording (plus its pre-roll) there are frames to keep, and the
    stop has the time to finish the clip: it must be there (early on, none is acceptable)."""
    events = tmp_path / "events"
    run = start([str(PIPELINE), "--events-dir", str(events), "--trigger-at", "20", "--post-s", "60"])
    run.wait_for("recording ")  # the clip is being written
    ended = run.stop(after_s=after_s)
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
