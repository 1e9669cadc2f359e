"""The ``edgepipe`` command as a user runs it: real subprocesses, real signals, real files."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.cli_process import edgepipe, start
from tests.support.disks import full_device

pytestmark = pytest.mark.slow


def write(tmp_path: Path, body: str, name: str = "p.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


ENDLESS = """\
    import asyncio
    from edgepipe import Pipeline

    async def counter():
        n = 0
        while True:
            yield {"kind": "count", "n": n}
            n += 1
            await asyncio.sleep(0.002)

    class FileSink:
        '''Buffers in memory; only stop() writes, so a sink that is not stopped loses it all.'''
        def __init__(self, path):
            self.path = path
            self.seen = []
        def process(self, item):
            self.seen.append(item["n"])
        def stop(self):
            with open(self.path, "w") as f:
                f.write("\\n".join(map(str, self.seen)))

    def pipeline(out: str = "sink.txt") -> Pipeline:
        p = Pipeline("endless")
        src = p.source("counter", counter)
        mid = p.stage("relay", lambda item: item, inputs=src, queue_size=64)
        p.sink("file", FileSink(out), inputs=mid, queue_size=64)
        return p
"""


def test_help_lists_the_commands() -> None:
    result = edgepipe("--help")
    assert result.returncode == 0
    for command in ("run", "graph", "health"):
        assert command in result.stdout
    script = Path(sys.executable).parent / "edgepipe"
    assert subprocess.run([str(script), "--help"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_gracefully_with_sinks_flushed_and_results_complete(tmp_path: Path, signum: int) -> None:
    pipeline = write(tmp_path, ENDLESS)
    results = tmp_path / "results.jsonl"
    sink_file = tmp_path / "sink.txt"
    health = tmp_path / "health.json"
    proc = start("run", pipeline, "--results", results, "--health-file", health, "--out", sink_file)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (results.exists() and results.stat().st_size > 2000):
            time.sleep(0.1)
        assert edgepipe("health", str(health)).returncode == 0  # alive while running
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    lines = results.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line whole: nothing cut off
    numbers = [r["data"]["n"] for r in records if r["kind"] == "count"]
    assert numbers == list(range(len(numbers)))
    assert len(numbers) > 20
    sunk = [int(x) for x in sink_file.read_text().split()]
    assert sunk == numbers  # the sink saw exactly what the results recorded: drained, flushed
    assert all(r["node"] == "relay" for r in records)


def test_duration_stops_the_demo_cleanly(tmp_path: Path, centerface: Path) -> None:  # model cached first
    results = tmp_path / "r.jsonl"
    result = edgepipe(
        "run",
        "pipelines/demo.py",
        "--duration",
        "1.5",
        "--source",
        "synthetic://320x240@30",
        "--results",
        str(results),
        "--stats",
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in results.read_text().splitlines()]
    motions = [r for r in records if r["kind"] == "motion"]
    assert len(motions) > 20
    assert all(m["kind"] == "motion" and m["node"] == "motion" for m in motions)
    assert "summary" in result.stderr
    assert "camera" in result.stderr


def test_results_to_stdout(tmp_path: Path, centerface: Path) -> None:  # model cached first
    result = edgepipe(
        "run",
        "pipelines/demo.py",
        "--source",
        "synthetic://160x120@60",
        "--duration",
        "1",
        "--results",
        "-",
        "-q",
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    motion = [r["data"]["frame"] for r in records if r["kind"] == "motion"]
    assert len(motion) > 20
    assert motion == sorted(motion)
    assert {r["kind"] for r in records} == {"motion", "source_state", "detections"}


BAD_FILES = {
    "syntax": ("def pipeline(:\n    pass\n", r"bad\.py:1: syntax error"),
    "no_function": ("x = 1\n", r"bad\.py: defines no pipeline\(\) function"),
    "cycle": (
        """\
        from edgepipe import Pipeline
        def pipeline():
            p = Pipeline()
            p.source("src", [1, 2])
            p.stage("a", str, inputs=["src", "b"])
            p.stage("b", str, inputs="a")
            p.sink("out", print, inputs="b")
            return p
        """,
        r"bad\.py:5: node 'a': is part of a cycle: a -> b -> a",
    ),
    "dangling": (
        """\
        from edgepipe import Pipeline
        def pipeline():
            p = Pipeline()
            p.source("camera", [1, 2])
            p.sink("out", print, inputs="camrea")
            return p
        """,
        r"bad\.py:5: node 'out': input 'camrea' is not a node in this pipeline; did you mean 'camera'\?",
    ),
    "raises": (
        """\
        from edgepipe import Pipeline
        def pipeline():
            p = Pipeline()
            p.source("camera", undefined_source)
            return p
        """,
        r"bad\.py:4: pipeline\(\) raised NameError: name 'undefined_source' is not defined",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_pipeline_file_is_a_short_message_and_exit_2(tmp_path: Path, case: str) -> None:
    body, message = BAD_FILES[case]
    path = write(tmp_path, body, "bad.py")
    for command in ("run", "graph"):
        result = edgepipe(command, str(path))
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr

        assert re.search(r"^edgepipe: error: .*" + message, lines[0]), lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sorce", "x.mp4"], r"demo\.py:\d+: unknown parameter --sorce; did you mean --source\?"),
        (["--threshold", "high"], r"demo\.py:\d+: --threshold: expected an integer, got 'high'"),
    ],
)
def test_bad_parameter_is_exit_2(args: list[str], message: str) -> None:
    result = edgepipe("run", "pipelines/demo.py", *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    import re

    assert re.search(message, result.stderr), result.stderr


def test_missing_file_and_unwritable_results_are_exit_2(tmp_path: Path) -> None:
    result = edgepipe("run", str(tmp_path / "nope.py"))
    assert result.returncode == 2
    assert "nope.py: no such pipeline file" in result.stderr
    result = edgepipe(
        "run", "pipelines/demo.py", "--duration", "1", "--results", str(tmp_path / "no" / "dir" / "r.jsonl")
    )
    assert result.returncode == 2, result.stderr
    assert "argument --results: expected a file path in an existing folder" in result.stderr
    assert "dir does not exist; create it first" in result.stderr
    assert "Traceback" not in result.stderr


FAILING = """\
    from edgepipe import Pipeline

    def explode(x):
        raise ValueError(f"cannot handle {x} from rtsp://u:Hunter2@cam/?passphrase=Hunter2")

    def pipeline() -> Pipeline:
        p = Pipeline()
        src = p.source("src", [1, 2, 3])
        p.sink("out", print, inputs=p.stage("explode", explode, inputs=src, on_error="stop"))
        return p
"""


def test_run_time_failure_names_the_node_and_exits_1(tmp_path: Path) -> None:
    path = write(tmp_path, FAILING)
    result = edgepipe("run", str(path))
    assert result.returncode == 1
    shown = "ValueError: cannot handle 1 from rtsp://u:***@cam/?passphrase=***"  # no secret in any line
    assert f"edgepipe: error: node 'explode': {shown}" in result.stderr
    assert "Traceback" not in result.stderr
    debug = edgepipe("run", str(path), "--debug")
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr
    assert "Hunter2" not in result.stderr + debug.stderr


def test_graph_prints_nodes_channels_and_resources() -> None:
    text = edgepipe("graph", "pipelines/demo.py")
    assert text.returncode == 0, text.stderr
    assert "camera -> motion  size=1 policy=latest  (a live source's frames)" in text.stdout
    assert "motion        stage   MotionDetector  [Frame -> Message]" in text.stdout
    assert "faces         stage   Detector  [Frame -> Detections]" in text.stdout
    data = json.loads(edgepipe("graph", "pipelines/demo.py", "--format", "json").stdout)
    nodes = ["camera", "motion", "faces", "view", "log", "face_log", "view_results"]  # view*: its viewers
    assert [n["id"] for n in data["nodes"]] == nodes
    assert data["channels"][0] == {
        "from": "camera",
        "to": "motion",
        "lane": "camera",
        "size": 1,
        "policy": "latest",
        "max_age_s": None,
        "live_frames": True,
    }
    assert data["headroom"] == 0.3
    assert {n["id"]: n["priority"] for n in data["nodes"]}["camera"] == "high"
    recording = json.loads(
        edgepipe("graph", "pipelines/demo.py", "--record", "x.mp4", "--format", "json").stdout
    )
    assert [n["id"] for n in recording["nodes"]] == [
        "camera", "motion", "faces", "log", "face_log", "annotate", "view_results", "record", "view"
    ]  # fmt: skip
    lanes = {c["lane"]: c for c in recording["channels"] if c["to"] == "annotate"}
    assert lanes["frames"] == {
        "from": "camera",
        "to": "annotate",
        "lane": "frames",
        "size": 1,
        "policy": "latest",
        "max_age_s": None,
        "live_frames": True,
    }
    assert lanes["motion"]["policy"] == lanes["faces"]["policy"] == "block"  # results are never dropped
    recording_text = edgepipe("graph", "pipelines/demo.py", "--record", "x.mp4").stdout
    assert "camera -> annotate[frames]  size=1 policy=latest" in recording_text


def test_results_on_a_full_disk_lose_results_not_the_pipeline(tmp_path: Path) -> None:
    # A /dev/full-like node accepts the open and fails every write with ENOSPC, as a full SD card does.
    full = full_device(tmp_path)
    sink_file = tmp_path / "sink.txt"
    pipeline = write(tmp_path, ENDLESS)
    result = edgepipe(
        "run", str(pipeline), "--duration", "1", "--results", str(full), "--out", str(sink_file)
    )
    assert result.returncode == 1
    assert re.search(
        rf"edgepipe: error: {re.escape(str(full))}: cannot write results: No space left on device \(\d+ lost\)",
        result.stderr,
    )
    assert "Traceback" not in result.stderr
    assert len(sink_file.read_text().split()) > 20  # the pipeline itself ran to the end


def test_live_stats_table_on_a_terminal(tmp_path: Path) -> None:
    # A real pseudo-terminal on stderr, as when a person runs it: the table is redrawn live.
    primary, secondary = os.openpty()
    os.set_blocking(primary, False)
    proc = start("run", "pipelines/demo.py", "--duration", "2.5", "--stats", "-q", stdout=subprocess.DEVNULL,
                 stderr=secondary, env={"COLUMNS": "160", "LINES": "40"})  # fmt: skip
    os.close(secondary)
    screen = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        readable, _, _ = select.select([primary], [], [], 0.2)
        if readable:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not chunk:
                break
            screen += chunk
        elif proc.poll() is not None:
            break
    os.close(primary)
    assert proc.wait(timeout=10) == 0
    text = screen.decode(errors="replace")
    assert text.count("out/s") >= 3  # at least two live redraws and the summary
    assert "demo: summary" in text
    assert "latest" in text  # the camera -> motion channel's policy


@pytest.mark.slow
@pytest.mark.parametrize("command", [["graph", "pipelines/demo.py", "--format", "json"], ["models", "list"]])
def test_a_reader_that_closes_stdout_is_no_internal_error(command: list[str]) -> None:
    # `edgepipe graph FILE | head -1`: the reader closed the pipe before the output was written.
    proc = start(*command, text=False)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert b"Error" not in err, err
