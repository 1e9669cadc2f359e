from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgepipe.lm.scene import SceneWindow
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire.results import Message


def faces(source: str, seq: int, n: int) -> Detections:
    items = [Detection((0.0, 0.0, 10.0, 10.0), 0.9, 0, "face") for _ in range(n)]
    return Detections(source, seq, None, None, 64, 64, "m", items)


def test_summary_counts_frames_with_each_label_inside_the_window() -> None:
    window = SceneWindow(5.0)
    for seq in range(4):
        window.observe(faces("cam", seq, seq % 3), now=100.0 + seq)
    window.observe(faces("cam", 9, 2), now=90.0)  # too old
    window.observe(Message("event", {}), now=103.0)  # other items count by kind
    fields = window.fields(now=104.0)
    assert (
        fields["summary"]
        == "face in 2 of 4 frames (up to 2 at once), event in 1 of 4 frames (up to 1 at once)"
    )
    assert fields["frames"] == 4
    assert fields["counts"] == {"face": 2, "event": 1}
    assert fields["sources"] == "cam"
    assert SceneWindow(5.0).fields(now=1.0)["summary"] == "no input"
    with pytest.raises(ValueError, match="window_s"):
        SceneWindow(0)
    with pytest.raises(ValueError, match="forget_s"):
        SceneWindow(60.0, forget_s=30.0)


def test_observed_sources_are_live_then_silent() -> None:
    window = SceneWindow(10.0, stale_s=2.0)
    for i in range(20):  # 10 frames/s for two seconds
        window.observe(faces("front", i, 0), now=100.0 + i / 10)
    window.observe(faces("back", 0, 0), now=101.0)
    front, back = window.source_states(now=102.0)
    assert (front.source, front.state, front.frames) == ("front", "live", 20)
    assert front.fps == pytest.approx(10.0, rel=0.06)
    assert back.state == "live"
    state = window.fields(now=110.0)["state"]
    assert "back: silent, 1 frame analysed, no frames for 9 s" in state  # one frame is no rate
    assert state.startswith("front: silent")


def test_a_source_status_gives_its_own_state_and_reason() -> None:
    camera = SimpleNamespace(state_info=("stalled", "read timed out"), reconnects=2)
    window = SceneWindow(10.0)
    window.sources = {"camera": camera}  # what Describe gives it: current_node().sources
    assert window.fields(now=5.0)["state"] == "camera: stalled (read timed out), no frames yet, 2 reconnects"
    camera.state_info = ("live", "ignored while live")
    window.observe(faces("camera", 0, 1), now=6.0)
    assert window.source_states(now=6.5)[0].to_dict() == {
        "source": "camera", "state": "live", "frames": 1, "fps": None, "last_frame_s": 0.5,
        "reconnects": 2, "reason": "",
    }  # fmt: skip


def test_the_first_report_after_one_frame_gives_no_rate() -> None:
    # A prompt rendered the moment the first frame arrives: 1 frame over 0.2 ms is not 5000 frames/s.
    window = SceneWindow(10.0)
    window.observe(faces("cam", 0, 1), now=50.0)
    assert window.fields(now=50.0002)["state"] == "cam: live, 1 frame analysed"
    window.observe(faces("cam", 1, 1), now=50.1)
    window.observe(faces("cam", 2, 1), now=50.2)
    assert window.fields(now=50.2001)["state"] == "cam: live, 10.0 frames/s analysed"


def test_sources_remembered_are_bounded() -> None:
    window = SceneWindow(1.0)
    for i in range(300):
        window.observe(faces(f"s{i}", 0, 0), now=float(i))
    assert len(window.source_states(now=300.0)) == 256


def test_sources_silent_past_forget_s_leave_the_state() -> None:
    window = SceneWindow(10.0, stale_s=2.0, forget_s=60.0)
    window.observe(faces("old", 0, 0), now=0.0)
    window.observe(faces("new", 0, 0), now=50.0)
    assert [s.source for s in window.source_states(now=59.0)] == ["old", "new"]
    assert [s.source for s in window.source_states(now=61.0)] == ["new"]
    assert window.fields(now=61.0)["state"] == "new: silent, no frames for 11 s"


def test_only_the_window_is_kept() -> None:
    # 10 frames/s for 20 minutes through a 5 s window: what is held is the window's 50 or so
    # frames, not every frame up to the deque's cap (10,000: ~2 MB, and walked at every report).
    window = SceneWindow(5.0)
    for i in range(12_000):
        window.observe(faces("cam", i, 1), now=i / 10)
    assert len(window._seen) <= 51
    assert window.fields(now=1199.95)["frames"] == 50  # 1195.0 .. 1199.9 s
