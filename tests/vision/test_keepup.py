"""The interval at which a detector keeps up with live cameras (pure arithmetic, fake clock)."""

from __future__ import annotations

import pytest

from edgepipe.core.context import CallLimit
from edgepipe.vision.keepup import BUSY, SETTLE_S, KeepUp


def feed(keep: KeepUp, cameras: int, fps: float, seconds: float, model_s: float) -> float:
    """Frames from ``cameras`` at ``fps`` for ``seconds``; one model call in four timed as given
    (the tracked frames take no thread of the model's)."""
    t = 0.0
    n = 0
    while t < seconds:
        for cam in range(cameras):
            keep.arrived(f"cam{cam}", t)
            if n % 4 == 0:
                keep.took(model_s)
            n += 1
        keep.update(t)
        t += 1 / fps
    return keep.interval


def test_four_cameras_faster_than_the_model_get_an_interval_that_fits_its_busy_share() -> None:
    keep = KeepUp()
    interval = feed(keep, cameras=4, fps=30, seconds=5, model_s=0.05)
    # 120 frames/s; the model's one thread is busy 120/N x 0.05 = BUSY at the answer.
    assert interval == pytest.approx(120 * 0.05 / BUSY, rel=0.07)
    assert 120 / interval * 0.05 <= BUSY * 1.07


def test_calls_in_flight_share_the_work_by_littles_law() -> None:
    # Two calls in flight, each 50 ms (its wait for the budget counted): 40 runs a second in
    # all, so half the interval one call needs.
    one, two = KeepUp(), KeepUp()
    two.calls = CallLimit(2, 2)
    assert feed(two, cameras=4, fps=30, seconds=5, model_s=0.05) == pytest.approx(
        feed(one, cameras=4, fps=30, seconds=5, model_s=0.05) / 2, rel=0.07
    )
    # Paced down to one call's worth, each call waits out the other's: 100 ms each, as one.
    paced = KeepUp()
    paced.calls = CallLimit(2, 2)
    assert feed(paced, cameras=4, fps=30, seconds=5, model_s=0.1) == pytest.approx(
        feed(KeepUp(), cameras=4, fps=30, seconds=5, model_s=0.05), rel=0.07
    )


def test_a_model_that_keeps_up_alone_is_left_on_every_frame() -> None:
    keep = KeepUp()
    assert feed(keep, cameras=1, fps=10, seconds=3, model_s=0.02) == 1.0


def test_nothing_moves_before_the_figures_are_in_a_rise_comes_at_once_and_a_fall_waits() -> None:
    keep = KeepUp()
    assert keep.needed() == 1.0  # no arrivals, no timings yet
    keep.arrived("cam0", 10.0)
    keep.arrived("cam0", 10.01)  # 100 fps
    keep.took(0.05)
    first = keep.update(10.01)
    assert first > 1.0
    keep.took(0.5)  # much slower now: more frames a run, at once (fewer runs can always be had)
    second = keep.update(10.02)
    assert second > first
    for _ in range(60):
        keep.took(0.01)  # quick again ...
    assert keep.update(10.02 + SETTLE_S / 2) == second  # ... but not lowered yet
    assert keep.update(10.02 + SETTLE_S) < second


def test_a_model_far_slower_than_its_cameras_gets_the_top_interval() -> None:
    keep = KeepUp()
    keep.arrived("cam0", 0.0)
    keep.arrived("cam0", 0.001)  # 1000 frames/s
    keep.took(0.5)
    assert keep.needed() == 64.0


def test_a_forgotten_or_silent_source_no_longer_counts() -> None:
    keep = KeepUp()
    for t in (0.0, 0.1, 0.2):
        keep.arrived("a", t)
        keep.arrived("b", t)
    assert keep.rate() == pytest.approx(20.0)
    keep.forget("b")
    assert keep.rate() == pytest.approx(10.0)
    keep.arrived("c", 0.0)
    keep.arrived("c", 0.1)
    for tenth in range(3, 14):
        keep.arrived("a", tenth / 10)
    assert keep.rate(1.3) == pytest.approx(10.0), "c fell silent at 0.1 s"


def test_frames_dropped_before_the_detector_still_count_in_the_cameras_rate() -> None:
    keep = KeepUp()
    for n in range(0, 300, 3):  # a 30 fps camera of which the detector sees one frame in three
        keep.arrived("cam0", n / 30, seq=n)
    assert keep.rate() == pytest.approx(30.0)


class _Frame:
    """What the detector's choice of interval reads of a frame."""

    def __init__(self, source: str, seq: int, fps: float = 30.0) -> None:
        self.source_id, self.seq = source, seq
        self.t_decoded_ns = int(seq / fps * 1e9)


def _detector(keep_up: bool | None, sources: int, every: int = 1, model_s: float = 0.05) -> float:
    """The interval a detector (not started: no model needed) uses once a ``model_s`` model
    call was measured, fed by ``sources`` live 30 fps cameras."""
    from edgepipe.vision import Detector

    choice = Detector("centerface", keep_up=keep_up, every=every).frame_choice
    choice.keeps_up = keep_up is not False  # what start() decides on live input
    for _ in range(20):
        choice.keep.took(model_s)
    for seq in range(60):
        for k in range(sources):
            choice.wants(_Frame(f"cam{k}", seq))  # type: ignore[arg-type]
    return choice.every_used


def test_a_detector_keeps_up_with_several_live_cameras_by_default_and_one_when_asked() -> None:
    assert _detector(None, 4) > 4, "four cameras at 30 fps, 50 ms a model run: the interval rose"
    assert _detector(None, 1) == 1.0, "one camera: the model stays on the newest frame"
    assert _detector(True, 1) > 1.0
    assert _detector(False, 4) == 1.0


def test_keeping_up_counts_frames_so_an_interval_that_already_keeps_up_is_left_alone() -> None:
    # Two cameras, 20 ms a model run: keeping up needs 1.26 frames a run; every=4 gives more.
    assert _detector(None, 2, every=4, model_s=0.02) == 4.0
    assert _detector(None, 4, every=4) == pytest.approx(120 * 0.05 / BUSY, rel=0.1)
