"""scripts/bench/recording.py, briefly: its rows, its figures and the kill-loss bound."""

from __future__ import annotations

import json

import pytest

from scripts.bench.recording import MAX_LOSS_MS, main


def test_a_short_run_measures_every_row_and_the_recorder_loses_at_most_a_second(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--size", "96x64", "--fps", "10", "--seconds", "3", "--every", "3"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    rows = {row["name"]: row for row in result["rows"]}
    assert set(rows) == {"plain (before)", "plain, same encoder", "Recorder (fragmented)",
                         "Recorder without zerolatency"}  # fmt: skip
    assert rows["Recorder (fragmented)"]["loss_worst_ms"] <= MAX_LOSS_MS + 100
    assert rows["plain (before)"]["loss_worst_ms"] > 2000  # a plain MP4 cut short plays nothing
    assert result["fragment_size_ratio"] == pytest.approx(1.0, abs=0.05)
