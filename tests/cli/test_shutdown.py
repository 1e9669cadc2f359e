"""Stopping within the budget: every shipped pipeline, and a run with a hung stage, a results
writer nobody reads, a source stuck opening or a dead pipe, exits within ``--drain-timeout`` +
1 s of SIGTERM (``--duration D``: D + drain + 1 s), and leaves no thread that would keep the
process alive. Real subprocesses, timed from the signal (see tests/support/stopping.py)."""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgepipe import load_pipeline
from edgepipe.runner import RunConfig, run
from edgepipe.serve import HttpServer, ServeConfig
from edgepipe.wire.results import FLUSH_INTERVAL_S
from scripts import tiny_lm
from tests.quality.source import parse
from tests.support.stopping import BUDGET_S, DRAIN_S, REPO, start

pytestmark = pytest.mark.slow

SHIPPED = {
    "demo": ["pipelines/demo.py", "--record", "{tmp}/demo.mp4"],
    "face_privacy": ["pipelines/face_privacy.py", "--output", "{tmp}/pixelated.mp4"],
    "rtsp_to_webrtc": ["pipelines/rtsp_to_webrtc.py"],
    "rtsp_to_webrtc_served": ["pipelines/rtsp_to_webrtc.py", "--port", "0"],
    "describe_scene": ["pipelines/describe_scene.py", "--model", "{lm}", "--every-s", "0.5",
                       "--max-new-tokens", "8"],
}  # fmt: skip

HUNG_STAGE = """
import threading

from edgepipe import Pipeline
from edgepipe.media import VideoSource


def hang(frame):
    threading.Event().wait()  # a driver call that never returns


def pipeline(source: str = "synthetic://320x240@30") -> Pipeline:
    p = Pipeline("hung")
    camera = p.source("camera", VideoSource(source))
    p.sink("out", lambda item: None, inputs=p.stage("hang", hang, inputs=camera))
    return p
"""

HUNG_STOP_HOOK = """
import threading

from edgepipe import Pipeline
from edgepipe.media import VideoSource


class Sink:
    def process(self, frame):
        pass

    def stop(self):
        threading.Event().wait()  # a flush to a disk that never answers


def pipeline() -> Pipeline:
    p = Pipeline("hung_stop")
    p.sink("out", Sink(), inputs=p.source("camera", VideoSource("synthetic://320x240@30")))
    return p
"""

BLOBS = """
import asyncio
import itertools

from edgepipe import Pipeline


async def blobs():
    for i in itertools.count():  # 2 MB/s of results: a pipe nobody reads is full at once
        await asyncio.sleep(0.01)
        yield {"kind": "blob", "i": i, "text": "x" * 20_000}


def pipeline() -> Pipeline:
    p = Pipeline("blobs")
    p.sink("out", lambda item: None, inputs=p.source("blobs", blobs))
    return p
"""


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_lm.write(tmp_path_factory.mktemp("lm"), tiny_lm.TinyConfig(max_seq_len=256), "gqa").parent


@pytest.fixture
def shipped(request: pytest.FixtureRequest, tmp_path: Path, centerface: Path, lm: Path) -> list[str]:
    return [a.format(tmp=tmp_path, lm=lm) for a in SHIPPED[request.param]]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts and never answers: an open waits for its deadline."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def unread_fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO open for reading (so a writer can open it) that nobody reads: writes block."""
    fifo = tmp_path / "results.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    yield fifo
    os.close(reader)


def pipeline_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pipeline.py"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("shipped", list(SHIPPED), indirect=True)
def test_a_shipped_pipeline_exits_within_its_budget_after_sigterm(shipped: list[str]) -> None:
    ended = start(shipped).stop()
    assert ended.code == 0, ended
    assert ended.took_s <= BUDGET_S, ended
    assert "ended (stop)" in ended.stderr, ended


@pytest.mark.parametrize("shipped", list(SHIPPED), indirect=True)
def test_a_timed_run_of_a_shipped_pipeline_ends_within_its_budget(shipped: list[str]) -> None:
    duration_s = 1.0
    ended = start([*shipped, "--duration", str(duration_s)]).ended()
    assert ended.code == 0, ended
    assert ended.took_s <= duration_s + BUDGET_S, ended  # from its "running" line
    assert "ended (stop)" in ended.stderr, ended  # drained, not "forced"


def test_a_hung_stage_is_cancelled_at_the_drain_deadline(tmp_path: Path) -> None:
    ended = start([pipeline_file(tmp_path, HUNG_STAGE)]).stop()
    assert ended.code == 0, ended
    assert ended.took_s <= BUDGET_S, ended
    assert f"drain did not finish within {DRAIN_S:.1f} s" in ended.stderr, ended


def test_a_hung_stop_hook_is_abandoned_within_the_budget(tmp_path: Path) -> None:
    # It had stop_timeout_s (5 s) whatever the drain deadline.
    ended = start([pipeline_file(tmp_path, HUNG_STOP_HOOK)]).stop()
    assert ended.code == 0, ended
    assert ended.took_s <= BUDGET_S, ended
    assert "[out] stop() did not return within" in ended.stderr, ended


def test_a_results_writer_nobody_reads_is_abandoned_its_lines_counted_lost(
    tmp_path: Path, unread_fifo: Path
) -> None:
    # It hung forever before (the final flush waited for the pipe; a second SIGTERM too).
    ended = start([pipeline_file(tmp_path, BLOBS), "--results", str(unread_fifo)]).stop()
    assert ended.took_s <= BUDGET_S, ended
    assert ended.code == 1, ended  # results were lost: docs/command-line.md's exit codes
    [line] = [x for x in ended.stderr.splitlines() if x.startswith("edgepipe: error:")]
    assert line.startswith(
        f"edgepipe: error: {unread_fifo}: cannot write results: the write was still blocked"
    )
    assert "(is anything reading it?); abandoned (" in line, line
    assert line.endswith(" lost)"), line
    assert "Traceback" not in ended.stderr


def test_a_fifo_nobody_opens_for_reading_does_not_hold_up_the_stop(tmp_path: Path) -> None:
    fifo = tmp_path / "results.fifo"
    os.mkfifo(fifo)  # opening it for writing waits for a reader, which never comes
    ended = start([pipeline_file(tmp_path, BLOBS), "--results", str(fifo)]).stop()
    assert ended.code == 0, ended
    assert ended.took_s <= BUDGET_S, ended
    assert f"stopped while opening {fifo} for the results" in ended.stderr, ended


def test_a_source_stuck_opening_does_not_hold_up_the_stop(silent_server: str) -> None:
    ended = start(
        ["pipelines/face_privacy.py", "--output", "", "--source", f"http://{silent_server}/cam"]
    ).stop()
    assert ended.code == 0, ended  # not -11: the exit leaves the open to its thread (os._exit)
    assert ended.took_s <= BUDGET_S, ended
    assert "stopped while opening" in ended.stderr, ended


def test_a_dead_results_pipe_stops_the_run_within_its_budget() -> None:
    run_ = start(["pipelines/demo.py", "--detect", "none", "--results", "-"], stdout=subprocess.PIPE)
    assert run_.proc.stdout is not None
    run_.proc.stdout.readline()  # results are flowing
    run_.proc.stdout.close()
    closed_t = time.monotonic()
    ended = run_.ended(closed_t)
    assert ended.code == 0, ended  # the head convention
    assert ended.took_s <= FLUSH_INTERVAL_S + BUDGET_S, ended  # the next flush finds it closed
    assert "standard output was closed by its reader; stopping" in ended.stderr, ended


def test_a_client_that_sends_half_a_request_does_not_hold_up_the_stop() -> None:
    # aiohttp waited 60 s for the handler reading its body.
    run_ = start(["pipelines/rtsp_to_webrtc.py", "--port", "0"])
    found = re.search(r"serving http://([\d.]+):(\d+)", run_.wait_for("serving http://"))
    assert found is not None
    with socket.create_connection((found[1], int(found[2]))) as client:
        client.sendall(b"POST /offer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000\r\n\r\n{\"sdp\": ")  # fmt: skip
        ended = run_.stop()
    assert ended.code == 0, ended
    assert ended.took_s <= BUDGET_S, ended


# -- no thread left behind ------------------------------------------------------------------


def _alive_non_daemon(before: set[threading.Thread]) -> list[str]:
    return [t.name for t in threading.enumerate() if not t.daemon and t not in before]


@pytest.mark.parametrize("shipped", list(SHIPPED), indirect=True)
def test_a_shipped_pipeline_leaves_no_thread_that_would_keep_the_process_alive(
    shipped: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    before = set(threading.enumerate())
    served = "--port" in shipped
    args = [a for a in shipped if a not in ("--port", "0")]
    watchers = [HttpServer(ServeConfig(port=0))] if served else []
    report = run(
        load_pipeline(args[0], args[1:]),
        RunConfig(governed=False, duration_s=1.0, drain_timeout_s=DRAIN_S, watchers=watchers),
    )
    assert report.stopped_by == "stop"
    assert _alive_non_daemon(before) == []


def test_the_hung_cases_leave_no_thread_that_would_keep_the_process_alive(
    tmp_path: Path, unread_fifo: Path, silent_server: str
) -> None:
    before = set(threading.enumerate())
    hung = load_pipeline(pipeline_file(tmp_path, HUNG_STAGE), [])
    t0 = time.monotonic()
    assert (
        run(hung, RunConfig(governed=False, duration_s=0.5, drain_timeout_s=DRAIN_S)).stopped_by == "forced"
    )
    blobs = load_pipeline(pipeline_file(tmp_path, BLOBS), [])
    report = run(
        blobs,
        RunConfig(governed=False, duration_s=0.5, drain_timeout_s=DRAIN_S, results_path=str(unread_fifo)),
    )
    assert report.results_lost > 0
    assert report.results_error is not None
    stuck = load_pipeline(pipeline_file(tmp_path, HUNG_STAGE), ["--source", f"rtsp://{silent_server}/cam"])
    assert run(stuck, RunConfig(governed=False, duration_s=0.5, drain_timeout_s=DRAIN_S)).stopped_by == "stop"
    assert time.monotonic() - t0 <= 3 * (0.5 + BUDGET_S)
    assert _alive_non_daemon(before) == []


def test_the_package_starts_no_thread_that_would_keep_the_process_alive() -> None:
    # The interpreter joins non-daemon threads at exit (concurrent.futures' pools, the loop's
    # default executor): one hung call would hang the exit. Blocking work goes to the daemon
    # pools of edgepipe.core.executor.
    found = []
    for path in sorted((REPO / "edgepipe").rglob("*.py")):
        for node in ast.walk(parse(path)):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            last = name.rsplit(".", 1)[-1]
            daemon = any(k.arg == "daemon" and ast.unparse(k.value) == "True" for k in node.keywords)
            default_executor = last == "run_in_executor" and node.args and ast.unparse(node.args[0]) == "None"
            if (
                last in ("ThreadPoolExecutor", "to_thread")
                or (last == "Thread" and not daemon)
                or default_executor
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert found == []
