from __future__ import annotations

import time

from edgepipe.infer.watchdog import Watchdog


class FakeRunOptions:
    terminate = False


def test_fires_at_the_deadline_and_not_before() -> None:
    dog = Watchdog("test-watchdog")
    options = FakeRunOptions()
    dog.arm(options, 0.15)
    time.sleep(0.05)
    assert options.terminate is False
    deadline = time.monotonic() + 2
    while not options.terminate and time.monotonic() < deadline:
        time.sleep(0.01)
    assert options.terminate is True
    assert dog.fired == 1


def test_a_disarmed_run_is_left_alone_and_disarm_says_whether_it_fired() -> None:
    dog = Watchdog("test-watchdog")
    early, late = FakeRunOptions(), FakeRunOptions()
    token_late = dog.arm(late, 0.05)
    token_early = dog.arm(early, 0.05)
    assert dog.disarm(token_early) is True
    time.sleep(0.3)
    assert early.terminate is False
    assert late.terminate is True
    assert dog.disarm(token_late) is False


def test_a_later_short_deadline_is_not_delayed_by_an_earlier_long_one() -> None:
    dog = Watchdog("test-watchdog")
    slow, fast = FakeRunOptions(), FakeRunOptions()
    dog.arm(slow, 30.0)
    dog.arm(fast, 0.05)
    time.sleep(0.3)
    assert fast.terminate is True
    assert slow.terminate is False
