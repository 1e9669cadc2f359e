from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import av
import av.error

from edgepipe.media.chooser import Opened
from edgepipe.media.errors import SourceError
from edgepipe.media.frame import Frame, FramePool
from edgepipe.media.handoff import Handoff
from edgepipe.media.outlet import Outlet
from edgepipe.media.reconnect import Reconnector
from edgepipe.media.status import SourceStatus
from edgepipe.media.url import parse

REFUSED = SourceError("cannot open: Connection refused", url="rtsp://cam", retryable=True)
GONE = SourceError("no such camera", url="rtsp://cam")


class FakeDecoder:
    """``frames`` decoded frames, then the end of the input, or ``fail`` raised by the demuxer."""

    def __init__(self, frames: int, fail: BaseException | None = None) -> None:
        self.frames = frames
        self.fail = fail
        self.closed = False

    def packets(self) -> Iterator[Any]:
        for _ in range(self.frames):
            yield SimpleNamespace(is_corrupt=False)
        if self.fail is not None:
            raise self.fail

    def decode(self, packet: Any) -> list[Any]:
        return [] if packet is None else [av.VideoFrame(32, 32, "yuv420p")]

    def close(self) -> None:
        self.closed = True


class FakeChooser:
    """Opens what it is given, in turn: a decoder, or an error to raise."""

    def __init__(self, *outcomes: FakeDecoder | SourceError) -> None:
        self.outcomes = list(outcomes)

    def open(self) -> Opened:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, SourceError):
            raise outcome
        return Opened(outcome, "h264 (software)", "")  # type: ignore[arg-type]


async def run(
    url: str, chooser: FakeChooser, pool_size: int = 4, **settings: Any
) -> tuple[list[Any], SourceStatus]:
    """Run a Reconnector in a thread as a source does; what reached the loop, in order (frames as
    their seq; all held until the end)."""
    handoff = Handoff(asyncio.get_running_loop())
    status = SourceStatus("cam")
    src = parse(url)
    outlet = Outlet(url, status, FramePool(pool_size), handoff, threading.Event())
    settings = {"live": src.live, "timeout_s": 1.0, "backoff_initial_s": 0.01, "backoff_max_s": 0.05,
                **settings}  # fmt: skip
    reconnector = Reconnector(outlet, chooser, src, **settings)  # type: ignore[arg-type]
    seen: list[Any] = []
    held: list[Frame] = []
    async with asyncio.TaskGroup() as tg:
        tg.create_task(asyncio.to_thread(outlet.run, reconnector.run))
        while True:
            kind, payload = await handoff.get()
            if kind == "frame":
                held.append(payload)
                seen.append(payload.seq)
            else:
                seen.append((kind, payload))
            if kind in ("end", "error"):
                break
    for frame in held:
        frame.release()
    return seen, status


async def test_a_file_that_cannot_be_opened_yet_is_retried_then_read_to_its_end() -> None:
    seen, status = await run("cam.mp4", FakeChooser(REFUSED, REFUSED, FakeDecoder(3)))
    assert seen == [
        ("state", ("connecting", "")),
        ("state", ("reconnecting", f"{REFUSED}; retrying in 0.01 s")),
        ("state", ("reconnecting", f"{REFUSED}; retrying in 0.02 s")),
        ("state", ("live", "")),
        1, 2, 3,
        ("state", ("ended", "3 frames, 0 corrupt packets")),
        ("end", None),
    ]  # fmt: skip
    assert (status.reconnects, status.decoded, status.delivered) == (2, 3, 3)


async def test_a_live_input_that_stalls_or_ends_is_reopened_with_backoff_reset_by_a_good_run() -> None:
    stalled = FakeDecoder(2, av.error.ExitError(-1414092869, "Immediate exit requested"))
    ended = FakeDecoder(1)
    seen, status = await run("rtsp://cam", FakeChooser(stalled, REFUSED, ended, REFUSED, GONE))
    assert seen == [
        ("state", ("connecting", "")),
        ("state", ("live", "")),
        1, 2,
        ("state", ("stalled", "no data within 1 s")),
        ("state", ("reconnecting", "")),
        ("state", ("reconnecting", f"{REFUSED}; retrying in 0.02 s")),
        ("state", ("live", "")),
        3,
        ("state", ("stalled", "stream ended")),
        ("state", ("reconnecting", "")),
        ("state", ("reconnecting", f"{REFUSED}; retrying in 0.01 s")),  # backoff reset by the good run
        ("error", GONE),
    ]  # fmt: skip
    assert status.reconnects == 4
    assert stalled.closed
    assert ended.closed


async def test_a_looped_file_starts_again_from_connecting() -> None:
    seen, _ = await run("cam.mp4", FakeChooser(FakeDecoder(1), FakeDecoder(1), GONE), loop=True)
    assert seen == [
        ("state", ("connecting", "")), ("state", ("live", "")), 1,
        ("state", ("connecting", "")), ("state", ("live", "")), 2,
        ("state", ("connecting", "")), ("error", GONE),
    ]  # fmt: skip


async def test_a_live_source_drops_what_it_decodes_while_every_frame_is_held() -> None:
    seen, status = await run("rtsp://cam", FakeChooser(FakeDecoder(3), GONE), pool_size=1)
    assert [s for s in seen if isinstance(s, int)] == [1]
    assert (status.decoded, status.delivered, status.dropped) == (3, 1, 2)
    assert status.gauges["pool_drops"] == 2
