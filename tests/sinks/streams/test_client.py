"""The TCP stream's reader (``python -m edgepipe.sinks.streams.client``), the client of
docs/streams.md, and the streams' bad declarations as ``edgepipe run`` reports them (exit 2)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from edgepipe import Message, Pipeline
from edgepipe.runner import RunConfig, run_async
from edgepipe.sinks.streams import TcpStream
from tests.sinks.waiting import until
from tests.support.cli_process import edgepipe

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]


def stream_pipeline(stream: TcpStream, n: int) -> Pipeline:
    async def numbers() -> AsyncIterator[Message]:
        await until(lambda: stream.clients >= 1)
        for i in range(n):
            yield Message("event", {"n": i, "blob": b"\x00\x01"})

    p = Pipeline("client")
    p.sink("tcp", stream, inputs=p.source("numbers", numbers))
    return p


async def test_the_client_prints_json_lines() -> None:
    stream = TcpStream(port=0)
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgepipe.sinks.streams.client", "127.0.0.1", str(stream.port), "--count", "3",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    await run_async(stream_pipeline(stream, 5), RunConfig(governed=False))
    out, err = await client.communicate()
    assert client.returncode == 0, err
    lines = [json.loads(line) for line in out.decode().splitlines()]
    assert [(m["kind"], m["n"], m["node"]) for m in lines] == [("event", i, "numbers") for i in range(3)]
    assert lines[0]["blob"] == {"base64": "AAE="}


def test_the_client_says_in_one_line_when_nothing_listens() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago and is closed now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-m", "edgepipe.sinks.streams.client", "127.0.0.1", str(port)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1
    assert re.fullmatch(rf"tcp://127\.0\.0\.1:{port}: .*refused.*\n", result.stderr, re.IGNORECASE)


def docs_block(marker: str) -> str:
    text = (REPO / "docs" / "streams.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    return next(b for b in blocks if marker in b)


async def test_the_documented_client_reads_a_stream() -> None:
    namespace: dict[str, Any] = {"__name__": "readme"}  # defines read_results, runs nothing
    exec(compile(docs_block("def read_results"), "docs/streams.md", "exec"), namespace)
    stream = TcpStream(port=0)
    reading = asyncio.create_task(
        asyncio.to_thread(lambda: list(namespace["read_results"]("127.0.0.1", stream.port)))
    )
    await run_async(stream_pipeline(stream, 4), RunConfig(governed=False))
    got = await reading
    assert [(m["v"], m["kind"], m["n"]) for m in got] == [(1, "event", i) for i in range(4)]


PIPELINE = '''
from edgepipe import Pipeline
from edgepipe.sinks.streams import JsonLines, TcpStream, UdpStream


def pipeline(tcp_port: int = 0, udp_port: int = 9, log: str = "") -> Pipeline:
    """Numbers to the streams."""
    p = Pipeline("streams")
    numbers = p.source("numbers", [{"kind": "n", "n": i} for i in range(3)])
    p.sink("tcp", TcpStream(port=tcp_port), inputs=numbers)
    p.sink("udp", UdpStream("127.0.0.1", udp_port), inputs=numbers)
    if log:
        p.sink("log", JsonLines(log), inputs=numbers)
    return p
'''


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--tcp-port", "{busy}"], r"TcpStream: cannot listen on 127\.0\.0\.1:\d+: Address already in use"),
        (
            ["--tcp-port", "70000"],
            r"TcpStream: port must be an integer in 0\.\.65535 \(0: any free port\), got 70000",
        ),
        (["--udp-port", "0"], r"UdpStream: port must be an integer in 1\.\.65535, got 0"),
        (["--log", "{tmp}/missing/x.jsonl"], r"JsonLines: expected a file path in an existing folder"),
    ],
)
def test_a_bad_stream_is_exit_2_naming_the_line(tmp_path: Path, args: list[str], error: str) -> None:
    file = tmp_path / "streams.py"
    file.write_text(PIPELINE)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        argv = [a.format(busy=busy.getsockname()[1], tmp=tmp_path) for a in args]
        result = edgepipe("run", file, *argv, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert re.search(rf"streams\.py:\d+: pipeline\(\) raised ValueError: {error}", result.stderr), (
        result.stderr
    )
    assert "Traceback" not in result.stderr
