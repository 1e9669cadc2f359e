from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

import pytest

from edgepipe.media.recording.clock import RecordingClock


@dataclass
class At:
    """What the clock reads of a frame."""

    time_s: float | None
    t_decoded_ns: int


def test_an_hour_of_ntsc_timestamps_does_not_drift() -> None:
    clock = RecordingClock(1000)
    frames = 30 * 3600
    last = 0
    for i in range(frames):  # 29.97 fps, decoded far faster than real time
        last = clock.next_pts(At(float(i * 3003 * Fraction(1, 90000)), i * 3003))
    assert last / 1000 == pytest.approx((frames - 1) * 3003 / 90000, abs=0.002)


@pytest.mark.parametrize("fps", [1, 2, 7.5, 15, 29.97, 60])
def test_a_keyframe_comes_at_least_every_second_at_any_frame_rate(fps: float) -> None:
    clock = RecordingClock(1000)
    keys = []
    for i in range(int(fps * 20)):
        t_s = i / fps
        pts = clock.next_pts(At(t_s, int(t_s * 1e9)))
        if clock.keyframe_due(pts):
            keys.append(pts)
    gaps = [b - a for a, b in itertools.pairwise(keys)]
    assert keys[0] == 0
    assert max(gaps) <= 1000
    assert min(gaps) >= 1000 - 1000 / fps - 1  # no more keyframes than the bound needs


def test_a_keyframe_the_encoder_made_restarts_the_interval() -> None:
    clock = RecordingClock(1000)
    due = []
    for i in range(30):  # 10 fps; the encoder cut a scene at 0.5 s
        pts = clock.next_pts(At(i / 10, i * 100_000_000))
        if pts == 500:
            clock.keyframe_made(500)
        if clock.keyframe_due(pts):
            due.append(pts)
    assert due == [0, 1500, 2500]
