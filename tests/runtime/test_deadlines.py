from __future__ import annotations

import time

import pytest

from edgepipe.runtime.deadlines import HOOK_GRACE_S, RESULTS_CLOSE_MIN_S, StopDeadlines


def test_before_a_stop_hooks_and_results_get_the_stop_timeout() -> None:
    deadlines = StopDeadlines(drain_timeout_s=1.0, stop_timeout_s=5.0)
    assert deadlines.hook_s() == 5.0
    assert deadlines.results_s() == 5.0


def test_after_a_stop_they_end_with_the_drain_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    deadlines = StopDeadlines(drain_timeout_s=1.0, stop_timeout_s=5.0)
    deadlines.request()
    now[0] = 100.5
    deadlines.request()  # asked again: the first request counts
    assert deadlines.hook_s() == pytest.approx(0.5 + HOOK_GRACE_S)
    assert deadlines.results_s() == pytest.approx(0.5)
    now[0] = 103.0  # past the drain deadline (a forced stop): a short grace each
    assert deadlines.hook_s() == HOOK_GRACE_S
    assert deadlines.results_s() == RESULTS_CLOSE_MIN_S


def test_a_long_drain_does_not_give_a_hook_more_than_the_stop_timeout() -> None:
    deadlines = StopDeadlines(drain_timeout_s=60.0, stop_timeout_s=2.0)
    deadlines.request()
    assert deadlines.hook_s() == 2.0
