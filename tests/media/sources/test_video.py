from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest

from edgepipe import NodeError, Pipeline
from edgepipe.media.errors import SourceError
from edgepipe.media.frame import I420, NV12, Frame
from edgepipe.media.sources.video import VideoSource
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runner import RunConfig, run_async


class FrameLog:
    """A sink that records what it saw of each frame (never holds the frame itself)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.seen: list[dict[str, object]] = []

    async def process(self, frame: Frame) -> None:
        self.seen.append({"seq": frame.seq, "w": frame.width, "h": frame.height, "format": frame.format,
                          "age_ms": (time.monotonic_ns() - frame.t_decoded_ns) / 1e6,
                          "mean": float(frame.y.mean())})  # fmt: skip
        if self.delay_s:
            await asyncio.sleep(self.delay_s)


def pipeline(source: VideoSource, sink: FrameLog, **channel: object) -> Pipeline:
    p = Pipeline()
    p.sink("out", sink, inputs=p.source("cam", source), **channel)  # type: ignore[arg-type]
    return p


async def test_file_frames_are_views_of_the_decoders_i420_in_order(clip: Path) -> None:
    source = VideoSource(str(clip))
    seen: list[tuple[int, str, tuple[int, int], bool]] = []

    def check(frame: Frame) -> None:
        u, _v = frame.chroma()
        seen.append(
            (frame.seq, frame.format, frame.y.shape, frame.y.base is not None and u.shape == (120, 160))
        )

    p = Pipeline()
    p.sink("check", check, inputs=p.source("cam", source))
    report = await run_async(p, RunConfig(governed=False))
    assert [s[0] for s in seen] == list(range(1, 61))  # every frame of a file, in order
    assert {s[1] for s in seen} == {I420}  # software decoders' layout, not converted
    assert {s[2] for s in seen} == {(240, 320)}
    assert all(s[3] for s in seen)  # views over the decoder's planes
    assert source.pool is not None
    assert source.pool.in_use == 0
    assert report.stats.node("cam").gauges["source"] == "ended"


async def test_frames_look_like_the_clip(clip: Path) -> None:
    frames: list[np.ndarray] = []

    def grab(frame: Frame) -> None:
        if frame.seq == 30:
            frames.append(frame.to_rgb())

    p = Pipeline()
    p.sink("grab", grab, inputs=p.source("cam", VideoSource(str(clip))))
    await run_async(p, RunConfig(governed=False))
    with av.open(str(clip)) as container:
        reference = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)][29]
    assert np.abs(frames[0].astype(int) - reference.astype(int)).mean() < 4  # same picture


async def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _damage(path: Path, out: Path, fraction: float, seed: int = 5) -> int:
    """Copy a raw H.264 stream with ``fraction`` of its packets' payload bytes scrambled."""
    rng = random.Random(seed)
    damaged = 0
    with av.open(str(path)) as container, out.open("wb") as f:
        for packet in container.demux(video=0):
            data = bytearray(bytes(packet))
            if not data:
                continue
            if rng.random() < fraction and len(data) > 40:
                for i in rng.sample(range(8, len(data)), k=min(24, len(data) - 8)):
                    data[i] ^= 0xFF
                damaged += 1
            f.write(data)
    return damaged


@pytest.mark.slow
async def test_damaged_packets_are_skipped_and_counted(
    make_clip: Callable[..., Path], tmp_path: Path
) -> None:
    clean = make_clip("long.h264", width=320, height=240, fps=30, seconds=10)
    broken = tmp_path / "broken.h264"
    damaged = _damage(clean, broken, 0.01)
    assert damaged >= 2
    sink = FrameLog()
    report = await run_async(pipeline(VideoSource(str(broken)), sink), RunConfig(governed=False))
    cam = report.stats.node("cam")
    assert cam.state == "done"  # decoded to the end, no exception
    assert cam.gauges["source"] == "ended"
    assert len(sink.seen) > 250  # nearly all of the 300 frames
    assert cam.gauges.get("corrupt", 0) + (300 - len(sink.seen)) >= 1  # the damage shows


@pytest.mark.parametrize("suffix", [".ts", ".h264"])
@pytest.mark.slow
async def test_truncated_file_decodes_what_is_there(
    make_clip: Callable[..., Path], tmp_path: Path, suffix: str
) -> None:
    whole = make_clip(f"whole{suffix}", width=320, height=240, fps=30, seconds=3)
    cut = tmp_path / f"cut{suffix}"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) * 6 // 10])
    sink = FrameLog()
    report = await run_async(pipeline(VideoSource(str(cut)), sink), RunConfig(governed=False))
    assert report.stats.node("cam").state == "done"
    assert 20 < len(sink.seen) < 90


@pytest.mark.slow
async def test_resolution_change_mid_stream(
    make_clip: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = make_clip("a.h264", width=320, height=240, fps=30, seconds=1)
    b = make_clip("b.h264", width=640, height=360, fps=30, seconds=1)
    joined = tmp_path / "joined.h264"
    joined.write_bytes(a.read_bytes() + b.read_bytes())  # Annex B streams concatenate
    sink = FrameLog()
    plan = MemoryPlan(limit_bytes=1 << 30)
    monkeypatch.setattr(memory, "_PLAN", plan)
    source = VideoSource(str(joined))
    await run_async(pipeline(source, sink), RunConfig(governed=False))
    sizes = [(s["w"], s["h"]) for s in sink.seen]
    assert sizes[0] == (320, 240)
    assert sizes[-1] == (640, 360)
    assert len(sizes) == 60
    # The pool is in the memory plan at the size it holds now (the old size's entry is gone).
    assert source.pool is not None
    n = source.pool.capacity
    assert [(r.owner, r.what, r.nbytes) for r in plan.entries()] == [
        (source.source_id, f"frame pool ({n} x 640x360)", n * 640 * 360 * 3 // 2)
    ]


@pytest.mark.slow
async def test_loop_repeats_a_file_and_realtime_paces_it(clip: Path) -> None:
    sink = FrameLog()
    t0 = time.monotonic()
    await run_async(
        pipeline(VideoSource(str(clip), loop=True, realtime=True), sink),
        RunConfig(governed=False, duration_s=2.6),
    )
    elapsed = time.monotonic() - t0
    n = len(sink.seen)
    assert 60 < n < 90  # about 30 fps for 2.6 s: more than one pass of the 2 s clip
    assert 2.5 < elapsed < 4


@pytest.mark.slow
async def test_a_looped_file_played_as_a_live_camera_keeps_its_pace_and_never_stalls(clip: Path) -> None:
    # A benchmark's camera: a clip at its own frame rate, forever, that drops frames when its
    # consumers hold every one (live) instead of waiting for them.
    sink = FrameLog()
    source = VideoSource(str(clip), loop=True, realtime=True, live=True)
    await run_async(
        pipeline(source, sink, policy="latest", queue_size=1), RunConfig(governed=False, duration_s=2.6)
    )
    n = len(sink.seen)
    assert 60 < n < 90  # about 30 fps, past the end of the 2 s clip
    assert source.reconnects == 0
    assert source.state in ("live", "stopped")


@pytest.mark.slow
async def test_slow_consumer_on_a_live_source_drops_old_frames_and_stays_current() -> None:
    sink = FrameLog(delay_s=0.33)  # 10x slower than the 30 fps camera
    source = VideoSource("synthetic://320x240@30")
    report = await run_async(
        pipeline(source, sink, policy="latest", queue_size=1), RunConfig(governed=False, duration_s=3)
    )
    assert source.pool is not None
    assert source.pool.capacity == 3  # 2 per consumer + 1
    inbox = report.stats.channel("out")
    made = source.decoded
    assert len(sink.seen) + inbox.dropped + source.dropped >= made - 3  # every frame accounted for
    assert inbox.dropped > 50
    # Capture-to-consumer latency: under 2 frame intervals (the processing comes after).
    ages = [float(s["age_ms"]) for s in sink.seen[1:]]  # type: ignore[arg-type]
    assert max(ages) < 2 * 1000 / 30, ages


async def test_missing_file_fails_at_start_with_its_name(tmp_path: Path) -> None:
    with pytest.raises(NodeError, match=r"node 'cam': SourceError: .*nope\.mp4: no such file"):
        await run_async(
            pipeline(VideoSource(str(tmp_path / "nope.mp4")), FrameLog()), RunConfig(governed=False)
        )


async def test_a_file_that_is_not_video(tmp_path: Path) -> None:
    text = tmp_path / "notes.mp4"
    text.write_text("this is not a video\n" * 100)
    with pytest.raises(NodeError, match=r"notes\.mp4: not a video file FFmpeg can read"):
        await run_async(pipeline(VideoSource(str(text)), FrameLog()), RunConfig(governed=False))


async def test_a_codec_with_no_decoder(clip: Path, tmp_path: Path) -> None:
    data = clip.read_bytes()  # noqa: ASYNC240 - a small file, in a test
    assert data.count(b"avc1") >= 1
    odd = tmp_path / "odd.mp4"
    odd.write_bytes(data.replace(b"avc1", b"zzz9"))  # a codec tag FFmpeg has no decoder for
    with pytest.raises(NodeError, match=r"odd\.mp4: its video codec .* has no decoder in this FFmpeg build"):
        await run_async(pipeline(VideoSource(str(odd)), FrameLog()), RunConfig(governed=False))


def test_unsupported_url_scheme_fails_when_declared() -> None:
    with pytest.raises(SourceError, match=r"^ftp://cam/x: unsupported URL scheme 'ftp'"):
        VideoSource("ftp://cam/x")
    with pytest.raises(SourceError, match=r"expected synthetic://WIDTHxHEIGHT@FPS"):
        VideoSource("synthetic://big")


@pytest.mark.slow
async def test_unreachable_camera_keeps_retrying_with_a_clear_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.media.conftest import free_port

    url = f"rtsp://127.0.0.1:{free_port()}/cam"
    sink = FrameLog()
    with caplog.at_level("WARNING"):
        report = await run_async(
            pipeline(VideoSource(url, timeout_s=0.5, backoff_max_s=0.2), sink),
            RunConfig(governed=False, duration_s=1.5),
        )
    assert report.stopped_by == "stop"  # never hangs, stops on request
    assert report.stats.node("cam").gauges["source"] == "reconnecting"
    messages = [r.getMessage() for r in caplog.records]
    assert any(url in m and "Connection refused" in m and "retrying" in m for m in messages), messages
    assert report.stats.node("cam").gauges["reconnects"] >= 3


async def test_synthetic_scene_moves() -> None:
    grabbed: list[np.ndarray] = []

    def grab(frame: Frame) -> None:
        assert frame.format == NV12
        if len(grabbed) < 2:
            grabbed.append(frame.y.copy())

    p = Pipeline()
    p.sink("grab", grab, inputs=p.source("cam", VideoSource("synthetic://160x120@60")))
    await run_async(p, RunConfig(governed=False, duration_s=0.3))
    assert len(grabbed) == 2
    assert np.abs(grabbed[0].astype(int) - grabbed[1].astype(int)).max() > 100  # the square moved


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6


@pytest.mark.slow
async def test_memory_stays_flat_under_a_slow_consumer() -> None:
    sink = FrameLog(delay_s=0.05)
    samples: list[float] = []

    async def sample_rss() -> None:
        while True:
            samples.append(_rss_mb())
            await asyncio.sleep(0.25)

    p = pipeline(VideoSource("synthetic://1280x720@60"), sink, policy="latest", queue_size=1)
    sampler = asyncio.ensure_future(sample_rss())
    try:
        await run_async(p, RunConfig(governed=False, duration_s=4))
    finally:
        sampler.cancel()
    # Growth, not wobble (the allocator may hand memory back): the peak of the last second is
    # no higher than the peak of the second one. A 720p frame is 1.4 MB: frames do not pile up.
    assert len(samples) >= 12
    assert max(samples[-4:]) - max(samples[4:8]) < 15, samples


async def test_an_explicit_hardware_decoder_that_cannot_work_here_falls_back(
    clip: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from edgepipe.media.hw import candidates

    hardware = [c for c in candidates("h264") if c.decoder]
    if not hardware:
        pytest.skip("this FFmpeg build names no hardware H.264 decoder")
    name = hardware[0].decoder
    assert name is not None
    sink = FrameLog()
    with caplog.at_level("WARNING"):
        report = await run_async(
            pipeline(VideoSource(str(clip), decoder=name), sink), RunConfig(governed=False)
        )
    if report.stats.node("cam").gauges["decoder"] == name:
        pytest.skip(f"{name} works on this machine")  # a lent GPU box: nothing to fall back from
    assert len(sink.seen) == 60
    assert report.stats.node("cam").gauges["decoder"] == "h264 (software)"
    assert any(name in r.getMessage() and "software" in r.getMessage() for r in caplog.records)
