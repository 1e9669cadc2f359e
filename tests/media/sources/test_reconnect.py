from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import av
import av.error
import pytest

from edgepipe.media.chooser import Opened
from edgepipe.media.errors import SourceError
from edgepipe.media.frame import Frame, FramePool
from edgepipe.media.sources.handoff import Handoff
from edgepipe.media.sources.outlet import Outlet
from edgepipe.media.sources.reconnect import Reconnector
from edgepipe.media.status import SourceStatus
from edgepipe.media.url import parse
from tests.media.conftest import free_port

REFUSED = SourceError("cannot open: Connection refused", url="rtsp://cam", retryable=True)
GONE = SourceError("no such camera", url="rtsp://cam")


class FakeDecoder:
    """``frames`` packets, then the end of the input, or ``fail`` raised by the demuxer. Packet
    ``i`` decodes to a frame with ``pts`` i; a keyframe every ``gop`` packets. A double of the
    decoder a source uses (:class:`~edgepipe.media.decode.StreamDecoder`): from packet
    ``breaks_at`` on, its decoder raises (or, ``silent``, gives nothing) until :meth:`switch`."""

    def __init__(
        self,
        frames: int,
        fail: BaseException | None = None,
        *,
        gop: int = 10,
        breaks_at: int | None = None,
        silent: bool = False,
    ) -> None:
        self.frames = frames
        self.fail = fail
        self.gop = gop
        self.breaks_at = breaks_at
        self.silent = silent
        self.switched_to: list[str] = []
        self.decoded: list[int] = []
        self.closed = False

    def packets(self) -> Iterator[Any]:
        for i in range(self.frames):
            yield SimpleNamespace(is_corrupt=False, is_keyframe=i % self.gop == 0, pts=i)
        if self.fail is not None:
            raise self.fail

    def decode(self, packet: Any) -> list[Any]:
        if packet is None:
            return []
        if self.breaks_at is not None and packet.pts >= self.breaks_at and not self.switched_to:
            if self.silent:
                return []
            raise av.error.InvalidDataError(1094995529, "Invalid data found when processing input")
        self.decoded.append(packet.pts)
        frame = av.VideoFrame(32, 32, "yuv420p")
        frame.pts = packet.pts
        return [frame]

    def switch(self, label: str) -> None:
        self.switched_to.append(label)

    def close(self) -> None:
        self.closed = True


class FakeChooser:
    """Opens what it is given, in turn: a decoder, or an error to raise; on hardware when
    ``hardware`` names the decoder, which fails over to ``then``."""

    def __init__(self, *outcomes: FakeDecoder | SourceError, hardware: str = "", then: str = "") -> None:
        self.outcomes = list(outcomes)
        self.hardware = hardware
        self.then = then
        self.failovers = 0

    def open(self) -> Opened:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, SourceError):
            raise outcome
        if self.hardware:
            return Opened(outcome, self.hardware, "", hardware=True)  # type: ignore[arg-type]
        return Opened(outcome, "h264 (software)", "")  # type: ignore[arg-type]

    def failover(self, decoder: FakeDecoder) -> Opened | None:
        self.failovers += 1
        if not self.then:
            return None
        decoder.switch(self.then)
        return Opened(decoder, self.then, "", hardware="software" not in self.then)  # type: ignore[arg-type]


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
                "knock_s": 0, **settings}  # fmt: skip
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


async def test_a_hardware_decoder_that_fails_mid_stream_is_replaced_and_the_source_stays_live(
    caplog: pytest.LogCaptureFixture,
) -> None:
    decoder = FakeDecoder(40, breaks_at=14, gop=10)
    chooser = FakeChooser(decoder, GONE, hardware="h264+cuda", then="h264 (software)")
    with caplog.at_level(logging.WARNING):
        seen, status = await run("rtsp://user:secret@cam/live", chooser, pool_size=64, fail_after=4)
    states = [s for s in seen if isinstance(s, tuple) and s[0] == "state"]
    assert states[:2] == [("state", ("connecting", "")), ("state", ("live", ""))]
    assert states[2] == ("state", ("stalled", "stream ended"))  # only at the end of the input
    # Every picture once, in order: the replacement started at the keyframe (packet 10), and
    # what it decoded again of 10..13 was left out.
    frames = [s for s in seen if isinstance(s, int)]
    assert frames == list(range(1, 41))
    assert decoder.decoded == [*range(14), *range(10, 40)]
    assert decoder.switched_to == ["h264 (software)"]
    assert (status.failovers, status.gauges["decoder_failovers"], status.decoder_used) == (
        1,
        1,
        "h264 (software)",
    )
    assert status.corrupt == 0  # the failed decoder's packets are not damage in the stream
    assert status.reconnects == 1  # the end of the input, not the failover
    warnings = [r.getMessage() for r in caplog.records if "failed on this stream" in r.getMessage()]
    assert warnings == [
        "[cam] rtsp://user:***@cam/live: decoder h264+cuda failed on this stream (4 packets in a row "
        "without a frame (Invalid data found when processing input)); switched to h264 (software), "
        "without reopening"
    ]


async def test_a_hardware_decoder_is_confirmed_on_the_streams_first_frames() -> None:
    # It opens, but gives nothing from the first packet on: replaced at the 4th, then the
    # replacement starts from the first keyframe; packets before a keyframe do not count.
    decoder = FakeDecoder(12, breaks_at=0, silent=True, gop=5)
    chooser = FakeChooser(decoder, GONE, hardware="hevc_cuvid", then="hevc+vaapi")
    seen, status = await run("rtsp://cam", chooser, pool_size=64, fail_after=4)
    assert [s for s in seen if isinstance(s, int)] == list(range(1, 13))
    assert decoder.decoded == list(range(12))
    assert (status.failovers, status.decoder_used) == (1, "hevc+vaapi")


async def test_a_software_decoder_has_nothing_to_fail_over_to_and_counts_damage() -> None:
    decoder = FakeDecoder(12, breaks_at=6)
    chooser = FakeChooser(decoder, GONE)
    seen, status = await run("rtsp://cam", chooser, pool_size=64, fail_after=2)
    assert chooser.failovers == 0
    assert (status.failovers, status.corrupt) == (0, 6)
    assert [s for s in seen if isinstance(s, int)] == list(range(1, 7))


async def test_when_no_decoder_can_take_over_it_stops_asking() -> None:
    decoder = FakeDecoder(20, breaks_at=3)
    chooser = FakeChooser(decoder, GONE, hardware="h264+cuda", then="")
    _, status = await run("rtsp://cam", chooser, pool_size=64, fail_after=4)
    assert chooser.failovers == 1
    assert (status.failovers, status.corrupt) == (0, 17)


def _reconnector(url: str, **settings: Any) -> Reconnector:
    handoff = Handoff(asyncio.get_running_loop())
    outlet = Outlet(url, SourceStatus("cam"), FramePool(2), handoff, threading.Event())
    return Reconnector(outlet, FakeChooser(), parse(url), live=True, **settings)  # type: ignore[arg-type]


class FakeWait:
    """The outlet's ``wait`` without waiting: each call is recorded (a fake sleep), and the
    ``n``-th one runs ``then`` (a server coming back during the backoff)."""

    def __init__(self, n: int = 0, then: Any = None) -> None:
        self.calls: list[float] = []
        self.n, self.then = n, then

    def __call__(self, seconds: float) -> bool:
        self.calls.append(seconds)
        if len(self.calls) == self.n:
            self.then()
        return False  # not stopped


async def test_a_closed_port_is_knocked_on_and_the_wait_ends_when_it_accepts() -> None:
    port = free_port()
    reconnector = _reconnector(f"rtsp://127.0.0.1:{port}/cam", backoff_initial_s=0.25, backoff_max_s=30.0,
                               knock_s=0.1)  # fmt: skip
    for _ in range(8):  # the delays grow to the 30 s cap
        reconnector._backoff.next()
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        wait = FakeWait(4, server.listen)  # the server comes back during the fourth knock's wait
        reconnector._outlet.wait = wait  # type: ignore[method-assign]
        stopped = await asyncio.to_thread(reconnector._wait_to_retry)
    assert not stopped
    assert wait.calls == [0.1] * 4  # knocks, not the 30 s backoff
    assert reconnector._backoff.peek() == 0.25  # started over: a new server


async def test_a_port_that_accepts_gets_no_knocks_only_the_backoff() -> None:
    knocks = 0
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        reconnector = _reconnector(f"rtsp://127.0.0.1:{port}/cam", backoff_initial_s=0.5, backoff_max_s=1.0,
                                   knock_s=0.05)  # fmt: skip
        wait = FakeWait()
        reconnector._outlet.wait = wait  # type: ignore[method-assign]
        server.settimeout(0.01)
        await asyncio.to_thread(reconnector._wait_to_retry)
        while True:  # what reached the server: the one check after the failure, no more
            try:
                server.accept()[0].close()
            except TimeoutError:
                break
            knocks += 1
    assert wait.calls == [0.5]  # the whole backoff, in one wait
    assert reconnector._backoff.peek() == 1.0
    assert knocks == 1
