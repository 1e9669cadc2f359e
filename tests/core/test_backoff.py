"""The one backoff schedule (edgepipe/core/backoff.py), with the jitter pinned by a fake random."""

from __future__ import annotations

import pytest

from edgepipe.core.backoff import Backoff


def test_the_delays_double_to_the_cap_and_start_over_on_reset() -> None:
    backoff = Backoff(0.25, 4.0)
    assert [backoff.next() for _ in range(7)] == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.attempt == 7
    backoff.reset()
    assert (backoff.peek(), backoff.next(), backoff.attempt) == (0.25, 0.25, 1)


def test_a_delay_by_the_count_of_failures_is_the_same_schedule() -> None:
    backoff = Backoff(0.1, 5.0)
    assert [backoff.delay_s(n) for n in (0, 1, 2, 3, 7, 10_000)] == pytest.approx(
        [0.1, 0.1, 0.2, 0.4, 5.0, 5.0]
    )
    assert backoff.peek() == 0.1  # counted by the caller: the schedule of next() is untouched


def test_the_jitter_spreads_each_delay_both_ways() -> None:
    draws = iter([0.0, 0.5, 0.999999])
    backoff = Backoff(1.0, 30.0, jitter=0.2, random=lambda: next(draws))
    assert [backoff.next() for _ in range(3)] == pytest.approx([0.8, 2.0, 4.8], rel=1e-5)


def test_the_first_delay_is_capped_too() -> None:
    assert Backoff(10.0, 4.0).next() == 4.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_s": -1.0}, "initial_s must be a finite number"),
        ({"max_s": float("nan")}, "max_s must be a finite number"),
        ({"factor": 0.5}, "factor must be at least 1"),
        ({"jitter": 1.0}, r"jitter must be in \[0, 1\)"),
    ],
)
def test_settings_that_cannot_be_right_are_refused(kwargs: dict[str, float], message: str) -> None:
    settings = {"initial_s": 0.5, "max_s": 30.0, **kwargs}
    initial_s, max_s = settings.pop("initial_s"), settings.pop("max_s")
    with pytest.raises(ValueError, match=message):
        Backoff(initial_s, max_s, **settings)
