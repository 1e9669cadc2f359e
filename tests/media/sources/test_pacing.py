from __future__ import annotations

from edgepipe.media.sources.pacing import Pacer, Ticker


class FakeTime:
    """A clock that moves only when told, and a wait that records what it was asked."""

    def __init__(self, now: float = 100.0, stopped: bool = False) -> None:
        self.now = now
        self.stopped = stopped
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(round(seconds, 6))
        self.now += seconds
        return self.stopped


def test_a_pacer_holds_each_frame_until_its_time_from_the_first_frame() -> None:
    t = FakeTime()
    pacer = Pacer(t.wait, t.clock)
    pacer.pace(2.0)  # the first frame is "now", whatever its timestamp
    t.now += 0.01
    pacer.pace(2.1)
    pacer.pace(None)  # no timestamp: passes at once
    t.now += 0.5
    pacer.pace(2.2)  # late: no wait, and no catching up either
    assert t.waits == [0.09]


def test_a_pacer_whose_first_frame_has_no_time_starts_its_clock_there() -> None:
    t = FakeTime()
    pacer = Pacer(t.wait, t.clock)
    pacer.pace(None)
    pacer.pace(0.25)
    assert t.waits == [0.25]


def test_a_ticker_keeps_its_rate_and_does_not_burst_after_a_pause() -> None:
    t = FakeTime(now=0.0)
    ticker = Ticker(10, t.wait, t.clock)
    t.now += 0.04  # the frame took 40 ms to make
    assert ticker.tick() is False
    assert t.waits == [0.06]
    t.now += 5.0  # the machine was paused
    assert ticker.tick() is False
    assert t.waits == [0.06]  # no wait, and the lost frames are not made up
    assert ticker.tick() is False
    assert t.waits == [0.06, 0.1]


def test_a_ticker_says_when_the_source_stopped_during_its_wait() -> None:
    t = FakeTime(now=0.0, stopped=True)
    assert Ticker(30, t.wait, t.clock).tick() is True
