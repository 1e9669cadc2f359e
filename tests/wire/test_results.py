from __future__ import annotations

import asyncio
import enum
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import pytest

from edgepipe.wire import results
from edgepipe.wire.results import Message, ResultsWriter, encode
from tests.support.disks import full_device


@dataclass
class Detection:
    kind = "detection"
    box: tuple[int, int, int, int]
    score: float


@dataclass
class TrackUpdate:
    track_id: int


class Color(enum.Enum):
    RED = "red"


def decode(item: object, node: str = "n") -> dict[str, object]:
    line = encode(item, node)
    assert line.endswith("\n")
    assert line.count("\n") == 1
    return json.loads(line)  # type: ignore[no-any-return]


def test_kind_comes_from_the_item() -> None:
    assert decode(Message("token", {"text": "hi"}))["kind"] == "token"
    assert decode({"kind": "event", "what": "door"}) | {"t": 0} == {
        "v": 1,
        "t": 0,
        "node": "n",
        "kind": "event",
        "data": {"what": "door"},
    }
    assert decode(Detection((1, 2, 3, 4), 0.9))["kind"] == "detection"
    assert decode(TrackUpdate(3))["kind"] == "track_update"
    assert decode(42)["kind"] == "int"


def test_message_may_speak_for_another_node_and_carry_its_time() -> None:
    record = decode(Message("source_state", {"state": "live"}, node="camera", t=12.5), node="watcher")
    assert record == {"v": 1, "t": 12.5, "node": "camera", "kind": "source_state", "data": {"state": "live"}}


def test_payloads_json_cannot_hold_are_converted_not_dropped() -> None:
    data = decode(
        {
            "kind": "x",
            "score": np.float32(0.5),
            "boxes": np.arange(4, dtype=np.int64).reshape(2, 2),
            "big": np.zeros((100, 100)),
            "det": Detection((1, 2, 3, 4), 0.25),
            "color": Color.RED,
            "raw": b"\x00\xff",
            "path": Path("/tmp/x"),
            "tags": {"a"},
        }
    )["data"]
    assert data == {
        "score": 0.5,
        "boxes": [[0, 1], [2, 3]],
        "big": {"shape": [100, 100], "dtype": "float64"},
        "det": {"box": [1, 2, 3, 4], "score": 0.25},
        "color": "red",
        "raw": {"base64": "AP8="},
        "path": "/tmp/x",
        "tags": ["a"],
    }


def test_unencodable_payload_is_kept_as_text() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    record = decode(Message("odd", cyclic))
    assert record["kind"] == "odd"
    assert "unencodable" in record["data"]  # type: ignore[operator]


async def test_writer_keeps_order_across_flushes(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    writer = ResultsWriter(str(path))
    await writer.open()
    for i in range(5000):
        await writer.write({"kind": "n", "i": i, "pad": "x" * 100}, "src")
    await writer.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["data"]["i"] for line in lines] == list(range(5000))
    assert writer.written == 5000


async def test_stdout_closed_by_its_reader_stops_quietly_and_is_no_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head -1` has gone
    stdout = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    writer = ResultsWriter("-")
    gone: list[bool] = []
    writer.on_reader_gone = lambda: gone.append(True)
    await writer.open()
    await writer.write({"kind": "n", "i": 1}, "src")
    await writer.flush()
    await writer.write({"kind": "n", "i": 2}, "src")
    await writer.close()
    assert gone == [True]
    assert writer.reader_gone
    assert writer.error is None
    assert (writer.written, writer.lost) == (0, 2)
    print("after", file=stdout, flush=True)  # now /dev/null: no EPIPE again, no noise at exit
    stdout.close()


async def test_a_full_disk_is_an_error_that_counts_what_was_lost(tmp_path: Path) -> None:
    full = full_device(tmp_path)
    writer = ResultsWriter(str(full))
    gone: list[bool] = []
    writer.on_reader_gone = lambda: gone.append(True)
    await writer.open()
    for i in range(3):
        await writer.write({"kind": "n", "i": i}, "src")
    await writer.close()
    assert writer.error == f"{full}: cannot write results: No space left on device"
    assert (writer.written, writer.lost, gone) == (0, 3, [])


def test_a_password_quoted_in_a_result_is_masked() -> None:
    # A runtime error's text quotes the camera URL as the library said it.
    line = encode(Message("error", {"message": "cannot reach rtsp://admin:hunter2pw@10.0.0.7/live"}), "probe")
    assert "hunter2pw" not in line
    assert json.loads(line)["data"]["message"] == "cannot reach rtsp://admin:***@10.0.0.7/live"


async def test_close_waits_for_a_write_that_a_cancelled_flush_left_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runtime cancels the periodic flush at the end; its write goes on in the thread, and
    # close() found nothing pending: the report counted half the lines (--results -).
    slow = threading.Event()

    def slow_write(file: IO[str], lines: list[str]) -> None:
        slow.wait(5)
        file.writelines(lines)
        file.flush()

    monkeypatch.setattr(results, "_write_lines", slow_write)
    writer = ResultsWriter(str(tmp_path / "r.jsonl"))
    await writer.open()
    for i in range(3):
        await writer.write({"kind": "n", "i": i}, "src")
    flushing = asyncio.ensure_future(writer.flush())
    await asyncio.sleep(0.05)
    flushing.cancel()
    asyncio.get_running_loop().call_later(0.1, slow.set)
    await writer.close(5.0)
    assert (writer.written, writer.lost, writer.error) == (3, 0, None)
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 3


async def test_a_writer_blocked_past_the_close_deadline_is_abandoned_its_lines_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    never = threading.Event()
    monkeypatch.setattr(results, "_write_lines", lambda file, lines: never.wait())
    writer = ResultsWriter(str(tmp_path / "r.jsonl"))
    await writer.open()
    await writer.write({"kind": "n", "i": 0}, "src")
    t0 = time.monotonic()
    await writer.close(0.2)
    assert time.monotonic() - t0 < 1.0
    assert (writer.written, writer.lost) == (0, 1)
    assert writer.error == (
        f"{tmp_path / 'r.jsonl'}: cannot write results: the write was still blocked 0.2 s after the run "
        "ended (is anything reading it?); abandoned"
    )
    never.set()
