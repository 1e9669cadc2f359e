"""scripts/bench/live_privacy.py: how a shipped run is judged (its runs are minutes long: run it
by hand, as CONTRIBUTING.md says)."""

from __future__ import annotations

from scripts.bench.live_privacy import CASES, met


def run(fps: float, cpu: float, limit: str | None) -> dict[str, object]:
    return {"fps_recorded": fps, "cpu": cpu, "target": 0.7, "limit": limit}


def test_a_run_passes_on_frames_recorded_or_on_the_budget_used_with_a_limit_named() -> None:
    assert met(run(14.9, 0.45, "input"))  # the camera's rate: nothing more to do
    assert met(run(7.0, 0.66, "budget"))  # within 6 points of the target, the limit named
    assert not met(run(7.0, 0.60, "model")), "budget left idle"
    assert not met(run(7.0, 0.69, "input")), "behind, yet no limit named"
    assert not met(run(7.0, 0.69, None))
    assert set(CASES) == {"camera", "medium", "heavy"}
