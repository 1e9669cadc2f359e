from __future__ import annotations

import asyncio
import itertools
import time
from fractions import Fraction

import av
import numpy as np
import pytest

from edgepipe.media.frame import Frame, from_rgb
from edgepipe.serve.encoder import SharedEncoder
from edgepipe.wire import messages

pytestmark = pytest.mark.usefixtures("libx264")


def frame(seq: int) -> Frame:
    rgb = np.zeros((360, 640, 3), np.uint8)
    rgb[:, (seq * 8) % 600 : (seq * 8) % 600 + 40] = 255  # a moving bar: P-frames carry something
    return from_rgb(rgb, source_id="cam", seq=seq)


async def encode(enc: SharedEncoder, n: int) -> None:
    loop = asyncio.get_running_loop()
    for seq in range(n):
        await loop.run_in_executor(None, enc.encode, frame(seq))
    await asyncio.sleep(0)  # packets reach subscriptions through the loop


async def test_nothing_is_encoded_without_subscribers() -> None:
    enc = SharedEncoder("cam")
    await encode(enc, 3)
    assert enc.encodes == 0


async def test_a_subscriber_starts_at_a_constrained_baseline_idr_in_90khz() -> None:
    enc = SharedEncoder("cam")
    sub = enc.subscribe()
    await encode(enc, 3)
    first = await sub.get()
    assert first.is_keyframe
    data = bytes(first)
    assert data.startswith(b"\x00\x00\x00\x01\x67")  # Annex B, SPS first
    assert data[5] == 66
    assert data[6] & 0x40
    assert first.time_base.denominator == 90_000
    second = await sub.get()
    assert not second.is_keyframe
    assert second.pts > first.pts
    assert enc.encodes == 3


@pytest.mark.slow
async def test_a_lagging_subscriber_is_flushed_and_waits_for_a_keyframe() -> None:
    enc = SharedEncoder("cam", queue_packets=4)
    slow = enc.subscribe()
    fast = enc.subscribe()
    got = 0
    for seq in range(30):
        await asyncio.get_running_loop().run_in_executor(None, enc.encode, frame(seq))
        await asyncio.sleep(0.01)
        while fast._queue.qsize():
            await fast.get()
            got += 1
    assert got == 30  # the fast one lost nothing
    assert slow.lagged >= 1
    assert slow.dropped > 0
    assert enc.encodes == 30
    slow.close()
    assert await slow.get() is None
    assert enc.subscribers == 1


async def test_a_forced_keyframe_skipped_at_the_gate_goes_on_the_next_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from edgepipe.sched.gate import Gate, Ticket

    enc = SharedEncoder("cam")
    sub = enc.subscribe()
    await encode(enc, 2)  # the first IDR, then a P-frame
    while sub._queue.qsize():
        await sub.get()
    enc._last_keyframe_s = time.monotonic() - 1.0  # a request may be served, the 2 s IDR is not due
    enc.request_keyframe()
    busy = Gate(1)
    holder = Ticket("describe", "lm", 0)
    t_start = busy.enter(holder)  # the budget is held: the forced frame is skipped
    monkeypatch.setattr("edgepipe.serve.encoder.gate", lambda: busy)
    monkeypatch.setattr("edgepipe.serve.encoder.ENCODE_WAIT_S", 0.01)
    await encode(enc, 1)
    assert enc.skipped == 1
    busy.leave(holder, t_start)
    await encode(enc, 1)
    assert (await sub.get()).is_keyframe, "the request survived the skipped frame"


async def test_encoding_after_close_is_a_no_op() -> None:
    enc = SharedEncoder("cam")
    enc.subscribe()
    await encode(enc, 1)
    enc.close()
    enc.subscribe()  # a viewer arriving as the pipeline stops
    await encode(enc, 1)
    assert enc.encodes == 1


async def test_a_camera_whose_media_time_restarts_keeps_a_forward_timeline() -> None:
    # An RTSP camera reconnected starts its media time again; the track's pts (the decode time,
    # which the results carry too) goes on forward, one frame interval apart, never bunched up.
    enc = SharedEncoder("cam")
    sub = enc.subscribe()
    loop = asyncio.get_running_loop()
    frames = []
    for seq, pts in enumerate([300, 301, 302, 0, 1]):  # 1/30 s units: 10 s, then 0 again
        f = frame(seq)
        f.pts, f.time_base = pts, Fraction(1, 30)
        frames.append(f)
        await loop.run_in_executor(None, enc.encode, f)
        await asyncio.sleep(0.03)
    pts = [(await sub.get()).pts for _ in frames]
    assert pts == [messages.pts_90k(f.t_decoded_ns) for f in frames]
    assert all(b - a > 1_000 for a, b in itertools.pairwise(pts))  # > 11 ms apart: real intervals


async def test_a_detailed_picture_comes_through_with_its_detail() -> None:
    # libx264 spreads bit_rate over 1/time_base frames per second unless told the frame rate:
    # with the 90 kHz time base, a 2 Mbit/s stream was a flat grey picture at 23 bytes a frame.
    from skimage import data
    from skimage.transform import resize

    photo = (resize(data.astronaut(), (360, 640), anti_aliasing=True) * 255).astype(np.uint8)
    enc = SharedEncoder("cam", codec="libx264")
    sub = enc.subscribe()
    loop = asyncio.get_running_loop()
    for seq in range(6):
        await loop.run_in_executor(None, enc.encode, from_rgb(photo, source_id="cam", seq=seq))
        await asyncio.sleep(0.01)
    decoder = av.CodecContext.create("h264", "r")
    decoded = []
    for _ in range(6):
        decoded += decoder.decode(await sub.get())
    decoded += decoder.decode(None)
    last = decoded[-1].to_ndarray(format="rgb24").astype(np.float64)
    mse = np.mean((last - photo.astype(np.float64)) ** 2)
    psnr = 10 * np.log10(255**2 / mse)
    assert psnr > 28, f"{psnr:.1f} dB: the picture lost its detail"
