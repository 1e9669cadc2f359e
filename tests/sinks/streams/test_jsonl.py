"""JsonLines: the lines of --results, rotated by size, written off the loop, a full disk said."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from edgepipe import Message, Pipeline
from edgepipe.runner import RunConfig
from edgepipe.runtime.engine import RunReport
from edgepipe.sinks.streams import JsonLines
from edgepipe.testing import FakeSource, run_pipeline
from tests.support.disks import full_device

pytestmark = pytest.mark.timeout(60)


def run(sink: JsonLines, items: list[Any], results: Path | None = None) -> RunReport:
    p = Pipeline("jsonl")
    p.sink("log", sink, inputs=p.source("events", FakeSource(items)))
    return run_pipeline(p, RunConfig(governed=False, results_path=str(results) if results else None))


def events(n: int, start: int = 0) -> list[Message]:
    return [Message("event", {"n": i, "text": "abc" * (i % 7)}) for i in range(start, start + n)]


def numbers(path: Path) -> list[int]:
    return [json.loads(line)["data"]["n"] for line in path.read_text().splitlines()]


def test_the_lines_are_those_of_results(tmp_path: Path) -> None:
    report = run(JsonLines(tmp_path / "out.jsonl"), events(40), results=tmp_path / "results.jsonl")
    assert (tmp_path / "out.jsonl").read_text() == (tmp_path / "results.jsonl").read_text()
    assert numbers(tmp_path / "out.jsonl") == list(range(40))
    assert report.stats.node("log").gauges == {"written": 40, "lost": 0, "rotated": 0}


def test_rotates_at_the_size_keeping_backups_lines_whole_in_order(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    report = run(JsonLines(path, max_bytes=1000, backups=3), events(300))
    files = [tmp_path / name for name in ("out.jsonl.3", "out.jsonl.2", "out.jsonl.1", "out.jsonl")]
    assert sorted(os.listdir(tmp_path)) == sorted(f.name for f in files)  # no .4: bounded
    for f in files:
        text = f.read_text()
        assert 0 < len(text.encode()) <= 1000
        assert text.endswith("\n")
        for line in text.splitlines():
            json.loads(line)  # whole lines only
    kept = [n for f in files for n in numbers(f)]
    assert kept == list(range(300 - len(kept), 300))  # oldest file first, nothing missing between
    assert report.stats.node("log").gauges["rotated"] > 3


def test_no_backups_starts_the_file_again(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    run(JsonLines(path, max_bytes=500, backups=0), events(100))
    assert os.listdir(tmp_path) == ["out.jsonl"]
    assert len(path.read_bytes()) <= 500
    assert numbers(path)[-1] == 99


def test_a_line_longer_than_the_size_gets_a_file_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    items = [
        Message("event", {"n": 0}),
        Message("event", {"n": 1, "text": "y" * 400}),
        Message("event", {"n": 2}),
    ]
    run(JsonLines(path, max_bytes=200, backups=5), items)
    assert [numbers(tmp_path / n) for n in ("out.jsonl.2", "out.jsonl.1", "out.jsonl")] == [[0], [1], [2]]


def test_an_existing_file_is_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    run(JsonLines(path), events(3))
    run(JsonLines(path), events(2, start=3))
    assert numbers(path) == [0, 1, 2, 3, 4]


def test_a_full_disk_is_said_counted_and_fails_the_run(tmp_path: Path) -> None:
    full = full_device(tmp_path)
    report = run(JsonLines(str(full)), events(20))
    gauges = report.stats.node("log").gauges
    assert (gauges["written"], gauges["lost"]) == (0, 20)
    (failed,) = report.failed_sinks
    assert failed.startswith(f"sink 'log': {full}: cannot write: No space left on device; 20 line(s) lost")
    assert report.output_failed


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (
            {"path": "{tmp}/missing/out.jsonl"},
            r"JsonLines: expected a file path in an existing folder .*does not exist",
        ),
        ({"path": "{tmp}"}, "JsonLines: expected a file path, not a folder"),
        ({"path": ""}, "JsonLines: expected a file path"),
        ({"path": "{tmp}/x.jsonl", "max_bytes": 0}, "max_bytes must be a positive integer, got 0"),
        ({"path": "{tmp}/x.jsonl", "backups": -1}, "backups must be an integer of at least 0, got -1"),
    ],
)
def test_bad_declarations_are_refused(tmp_path: Path, kwargs: dict[str, Any], error: str) -> None:
    kwargs = {**kwargs, "path": kwargs["path"].format(tmp=tmp_path)}
    with pytest.raises(ValueError, match=error):
        JsonLines(**kwargs)
    assert not (tmp_path / "x.jsonl").exists()
