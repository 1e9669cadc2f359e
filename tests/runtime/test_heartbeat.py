"""The heartbeat as ``edgepipe health`` reads it: real ``edgepipe run`` processes writing it,
real ``edgepipe health`` processes judging it, by exit code."""

from __future__ import annotations

import functools
import json
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from edgepipe.cli.main import main
from edgepipe.runner import RunConfig
from edgepipe.runtime.engine import Snapshot
from edgepipe.runtime.heartbeat import IDLE_MARGIN_S, Progress, check
from edgepipe.runtime.metrics import NodeStats
from tests.support.cli_process import edgepipe, in_process
from tests.support.cli_process import start as start_edgepipe

# A source at 20 items/s; `work` passes them on, or (hang=1) sleeps past its deadline on every
# one: the process, the loop and the heartbeat are all fine, and nothing moves.
PIPELINE = """\
    import asyncio, time
    from edgepipe import Pipeline

    async def ticks():
        n = 0
        while True:
            yield n
            n += 1
            await asyncio.sleep(0.05)

    def pipeline(hang: int = 0) -> Pipeline:
        def work(n):
            if hang:
                time.sleep(0.5)
            return n
        p = Pipeline("beat")
        out = p.stage("work", work, inputs=p.source("ticks", ticks), timeout_s=0.2, policy="latest",
                      queue_size=1)
        p.sink("sink", lambda n: None, inputs=out)
        return p
"""


def health(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return edgepipe("health", path, *args)


def start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Path]:
    pipeline = tmp_path / "p.py"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    beat = tmp_path / "health.json"
    proc = start_edgepipe("run", pipeline, "--health-file", beat, *args)
    return proc, beat


def wait_for(beat: Path, ok: Any, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            data: dict[str, Any] = json.loads(beat.read_text())
        except (OSError, ValueError):
            data = {}
        if data and ok(data):
            return data
        time.sleep(0.1)
    raise AssertionError(f"no heartbeat as wanted within {timeout_s} s: {beat.read_text()}")


def one_line_failure(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]


@pytest.mark.slow
def test_a_running_pipeline_is_healthy_and_a_stopped_one_is_not(tmp_path: Path) -> None:
    proc, beat = start(tmp_path, "--duration", "7")
    try:
        data = wait_for(beat, lambda d: d["progress"].get("sink", 0) > 5)
        assert data["stopping"] is False
        result = health(beat)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("ok: heartbeat")
        stopping = wait_for(beat, lambda d: d["stopping"])  # written when the stop begins
        assert stopping["idle_s"] < 1
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
    last = json.loads(beat.read_text())
    assert last["stopped"] is True
    # The CPU ledger's last second, by kind of work: the event loop's own, and the rest.
    assert last["cpu_cores"]["process"] > 0
    assert {"runtime", "overhead"} <= last["cpu_cores"].keys()
    one_line_failure(health(beat), "the pipeline has stopped")


@pytest.mark.slow
def test_future_corrupt_partial_and_idle_heartbeats_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, beat = start(tmp_path, "--hang", "1")
    try:
        first = wait_for(beat, lambda d: d["started"])
        # Items out of `work`: none; of the sink: none. Each item is only an attempt that failed.
        idle = wait_for(beat, lambda d: d["idle_s"] > 2, timeout_s=30)
        assert idle["progress"] == {"work": 0, "sink": 0}
        assert idle["errors"] > 3
        one_line_failure(health(beat, "--max-idle", "1"), "no item moved for", "limit 1 s")
        assert health(beat, "--max-idle", "600").returncode == 0
        # The default: the source's mean interval (0.05 s) plus the margin.
        assert IDLE_MARGIN_S <= first["max_idle_s"] < IDLE_MARGIN_S + 1
        text = beat.read_text()
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    copy = tmp_path / "copy.json"
    judged = functools.partial(in_process, capsys, "health", copy)  # files only from here: no child needed
    future = {**json.loads(text), "t": time.time() + 7.2e9, "idle_s": 0}
    copy.write_text(json.dumps(future))
    one_line_failure(judged(), "in the future")
    for broken in (text[: len(text) // 2], "", "[1, 2]", text.replace('"t": ', '"t": NaN, "x": ', 1)):
        copy.write_text(broken)
        one_line_failure(judged(), "unreadable heartbeat")
    fresh_from_dead = {**json.loads(text), "t": time.time(), "idle_s": 0}
    copy.write_text(json.dumps(fresh_from_dead))  # killed: never marked stopped
    one_line_failure(judged(), f"pid {proc.pid}", "is gone")


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf", "soon"])
@pytest.mark.parametrize("option", ["--max-age", "--max-idle"])
def test_a_limit_that_cannot_be_right_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    beat = tmp_path / "h.json"
    beat.write_text(json.dumps({"t": time.time(), "idle_s": 0}))
    with pytest.raises(SystemExit) as refused:  # argparse's refusal, in this process: no child needed
        main(["health", str(beat), f"{option}={value}"])
    assert refused.value.code == 2  # not an exception of the check's own
    assert f"argument {option}:" in capsys.readouterr().err


def test_fresh_stale_missing_and_broken_heartbeats(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    ok, reason = check(str(path), 30)
    assert not ok
    assert "no heartbeat yet" in reason
    path.write_text(json.dumps({"t": time.time(), "items_out": 12}))
    ok, reason = check(str(path), 30)
    assert ok
    assert "12 items out" in reason
    path.write_text(json.dumps({"t": time.time() - 120}))
    ok, reason = check(str(path), 30)
    assert not ok
    assert "limit 30 s" in reason
    path.write_text(json.dumps({"t": time.time(), "stopping": True}))
    assert check(str(path), 30) == (False, f"{path}: the pipeline is stopping (heartbeat 0.0 s ago)")
    path.write_text(json.dumps({"t": time.time(), "idle_s": 9.5, "max_idle_s": 8}))
    ok, reason = check(str(path), 30)
    assert not ok
    assert "no item moved for 9.5 s (limit 8 s" in reason
    assert check(str(path), 30, max_idle_s=10)[0]


def stats(node_id: str, kind: str, items_in: int, items_out: int, errors: int = 0) -> NodeStats:
    return NodeStats(node_id, kind, items_in, items_out, errors, 0, 0, None, None, None, 0.0, 0.0, 0.0,
                     "running", {})  # fmt: skip


def test_progress_counts_items_out_not_attempts() -> None:
    now = [100.0]
    progress = Progress(clock=lambda: now[0])
    snap = lambda *nodes: Snapshot(0.0, nodes, ())  # noqa: E731
    progress.sample(snap(stats("src", "source", 0, 10), stats("sink", "sink", 5, 0)), started=True)
    assert progress.done == {"sink": 5}
    now[0] = 103.0
    # A sink that took one more and is still on it, then failed it: no movement.
    progress.sample(snap(stats("src", "source", 0, 70), stats("sink", "sink", 6, 0)), started=True)
    now[0] = 104.0
    progress.sample(snap(stats("src", "source", 0, 90), stats("sink", "sink", 6, 0, errors=1)), started=True)
    now[0] = 105.0
    progress.sample(snap(stats("src", "source", 0, 110), stats("sink", "sink", 7, 0, errors=1)), started=True)
    assert progress.idle_s == 2.0  # the high of 6 at 103 s was the last new one
    assert progress.max_idle_s == pytest.approx(5 / 100 + IDLE_MARGIN_S)  # 100 items in 5 s


def test_the_heartbeat_says_the_calls_in_flight_of_nodes_that_run_several(tmp_path: Path) -> None:
    from edgepipe import Pipeline
    from edgepipe.runtime.heartbeat import heartbeat
    from edgepipe.testing import FakeSource, run_pipeline

    p = Pipeline()
    src = p.source("src", FakeSource(range(20)))
    p.sink("two", lambda item: time.sleep(0.01), inputs=src, instances=2)
    p.sink("one", lambda item: None, inputs=src)
    path = tmp_path / "beat.json"
    run_pipeline(p, RunConfig(governed=False, watchers=[heartbeat(str(path))]))
    beat = json.loads(path.read_text())
    assert beat["stopped"] is True
    assert beat["calls_in_flight"] == {"two": [0, 2]}, "nodes of one call at a time are left out"
