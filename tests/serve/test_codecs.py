from __future__ import annotations

import logging
from fractions import Fraction

import av
import pytest

from edgepipe.media.recording.recorder import Colour
from edgepipe.serve import codecs

pytestmark = pytest.mark.usefixtures("libx264")
TB = Fraction(1, 90_000)


def test_auto_opens_the_encoder_the_recorder_would_pick_with_live_settings() -> None:
    ctx = codecs.open_live("auto", 640, 360, 1_000_000, TB)
    assert ctx.codec.name == codecs.pick_encoder(640, 360)
    assert ctx.max_b_frames == 0
    assert (ctx.width, ctx.height) == (640, 360)


@pytest.mark.skipif("h264_nvenc" not in av.codecs_available, reason="no NVENC in this FFmpeg build")
def test_a_hardware_encoder_that_refuses_live_settings_gives_way_to_libx264(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # What a box whose trial encode passed but whose live open fails sees: NVENC is built in here
    # and cannot open without an NVIDIA GPU (where there is one, it opens: the test then checks it).
    monkeypatch.setattr(codecs, "pick_encoder", lambda w, h: "h264_nvenc")
    with caplog.at_level(logging.WARNING):
        ctx = codecs.open_live("auto", 640, 360, 1_000_000, TB)
    if ctx.codec.name == "libx264":
        assert "h264_nvenc works here but not with live settings" in caplog.text
    else:
        assert ctx.codec.name == "h264_nvenc"


def test_a_named_encoder_that_cannot_open_raises() -> None:
    with pytest.raises((av.error.FFmpegError, ValueError)):
        codecs.open_live("no_such_encoder", 640, 360, 1_000_000, TB)


def test_the_stream_says_what_its_pixels_mean() -> None:
    # An HD camera in BT.709 full range: a browser must convert with those, not BT.601 limited.
    colour = Colour(matrix="bt709", full_range=True, primaries=1, trc=1)
    ctx = codecs.open_live("libx264", 640, 360, 1_000_000, TB, colour)
    frame = av.VideoFrame(640, 360, "yuv420p")
    colour.tag(frame)
    frame.pts = 0
    decoder = av.CodecContext.create("h264", "r")
    decoded = [f for p in [*ctx.encode(frame), *ctx.encode(None)] for f in decoder.decode(p)]
    assert (decoded[0].colorspace, decoded[0].color_range) == (1, 2)  # AVCOL_SPC_BT709, AVCOL_RANGE_JPEG
