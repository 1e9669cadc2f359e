from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import av
import av.error
import numpy as np
import pytest

from edgepipe import Pipeline
from edgepipe.media.decode import StreamDecoder
from edgepipe.media.frame import Frame
from edgepipe.media.sources import failover
from edgepipe.media.sources.failover import DecoderWatch
from edgepipe.media.sources.video import VideoSource
from edgepipe.runner import RunConfig, run_async


def _packet(i: int, gop: int = 5) -> Any:
    return SimpleNamespace(is_keyframe=i % gop == 0, pts=i)


def _frame(pts: int | None) -> Any:
    return SimpleNamespace(pts=pts)


def test_packets_before_the_first_keyframe_do_not_count() -> None:
    watch = DecoderWatch(3)
    for i in range(3, 5):  # joined mid-GOP: no decoder gives a picture yet
        watch.packet(_packet(i))
        assert not watch.outcome(0, ValueError("no frame"))
    for i in range(5, 7):
        watch.packet(_packet(i))
        assert not watch.outcome(0, None)  # a decoder's delay: not yet a failure
    watch.packet(_packet(7))
    assert watch.outcome(0, ValueError("Invalid data"))
    assert watch.reason == "3 packets in a row without a frame (Invalid data)"
    assert watch.errors == 1


def test_a_frame_resets_the_count_and_a_software_decoder_is_not_watched() -> None:
    watch = DecoderWatch(2)
    for i, frames in enumerate([0, 1, 0, 1, 0, 1]):
        watch.packet(_packet(i))
        assert not watch.outcome(frames, None)
    idle = DecoderWatch(1, watching=False)
    idle.packet(_packet(0))
    assert not idle.outcome(0, ValueError("broken"))
    assert idle.restart(watching=False) == []


def test_the_replacement_starts_at_the_keyframe_before_the_failure_and_repeats_nothing() -> None:
    watch = DecoderWatch(4)
    for i in range(12):  # delivered 0..6, then 7.. fail; a keyframe (10) comes meanwhile
        packet = _packet(i)
        watch.packet(packet)
        if i < 7:
            watch.outcome(1, None)
            watch.delivered(_frame(i))
        elif watch.outcome(0, ValueError("broken")):
            break
    kept = watch.restart(watching=True)
    assert [p.pts for p in kept] == list(range(5, 11))  # from keyframe 5, not 10
    assert [f.pts for f in watch.fresh([_frame(i) for i in range(5, 11)])] == [7, 8, 9, 10]
    # Without timestamps: by count, as many as went out since that keyframe (5 and 6).
    assert [f.pts for f in watch.fresh([_frame(None)] * 3 + [_frame(9)])] == [None, 9]


def test_too_long_a_gop_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failover, "KEEP_MAX", 3)
    watch = DecoderWatch(2)
    for i in range(6):
        watch.packet(_packet(i, gop=100))
        watch.outcome(1, None)
    assert watch.restart(watching=True) == []  # the replacement waits for the next keyframe
    watch.packet(_packet(1, gop=100))
    assert not watch.outcome(0, ValueError("no frame"))
    assert not watch.outcome(0, ValueError("no frame"))  # still no keyframe: nothing counts


class BreakingContext:
    """A double of a hardware decoder's context: the real one until packet ``breaks_at``, then
    every packet raises, as a decoder that cannot decode the stream's profile does."""

    def __init__(self, ctx: Any, breaks_at: int) -> None:
        self.ctx = ctx
        self.breaks_at = breaks_at
        self.packets = 0

    @property
    def is_open(self) -> bool:
        return bool(self.ctx.is_open)

    def open(self, strict: bool = True) -> None:  # its threads start here (see StreamDecoder.decode)
        self.ctx.open(strict=strict)

    def decode(self, packet: Any) -> list[Any]:
        self.packets += 1
        if self.packets > self.breaks_at:
            raise av.error.InvalidDataError(1094995529, "Invalid data found when processing input")
        return self.ctx.decode(packet)  # type: ignore[no-any-return]


async def test_a_real_stream_plays_on_without_a_gap_when_its_decoder_breaks_mid_stream(
    clip: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_open = StreamDecoder.open

    def open_breaking(self: StreamDecoder) -> None:
        real_open(self)
        if self.choice is not None and self.choice.decoder == "h264":
            self._ctx = BreakingContext(self._ctx, breaks_at=20)

    monkeypatch.setattr(StreamDecoder, "open", open_breaking)
    seen: list[tuple[int, float]] = []

    def look(frame: Frame) -> None:
        seen.append((frame.seq, float(frame.y.mean())))

    # FFmpeg's software H.264 decoder asked for by name: it passes the trial clip, counts as a
    # named decoder, and (through the double) breaks on the stream at its 21st packet.
    source = VideoSource(str(clip), decoder="h264")
    p = Pipeline()
    p.sink("look", look, inputs=p.source("cam", source))
    with caplog.at_level(logging.WARNING):
        report = await run_async(p, RunConfig(governed=False))
    gauges = report.stats.node("cam").gauges
    assert gauges["source"] == "ended"
    assert gauges["decoder_failovers"] == 1
    assert gauges["decoder"] != "h264"  # software here; a working hardware decoder on a GPU box
    assert gauges.get("corrupt", 0) == 0
    assert source.reconnects == 0
    with av.open(str(clip)) as container:
        reference = [float(f.to_ndarray(format="gray").mean()) for f in container.decode(video=0)]
    assert [s[0] for s in seen] == list(range(1, 61))  # every frame once, in order
    assert np.allclose([s[1] for s in seen], reference, atol=1.0)  # the same pictures, none repeated
    warnings = [r.getMessage() for r in caplog.records if "failed on this stream" in r.getMessage()]
    assert len(warnings) == 1
    assert "[cam]" in warnings[0]
    assert "cam.mp4" in warnings[0]
    assert "decoder h264 failed on this stream (30 packets in a row without a frame" in warnings[0]
    assert f"switched to {gauges['decoder']}" in warnings[0]
