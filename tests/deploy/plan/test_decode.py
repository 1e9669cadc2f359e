from __future__ import annotations

import pytest

from edgepipe.deploy.plan.decode import StreamSet, decode_loads, parse_resolution
from edgepipe.deploy.plan.devices import find_device


def test_streams_against_the_vendors_stream_limits() -> None:
    nano = find_device("jetson-orin-nano-8gb")  # H.265: 11x 1080p30 is its largest pixel rate
    (load,) = decode_loads([StreamSet(12, 1920, 1080, 30, "h265")], nano)
    assert load.capacity == 11 * 1920 * 1080 * 30
    assert load.fits is False
    assert load.max_streams() == 11
    assert load.load_frac == pytest.approx(12 / 11)
    (ok,) = decode_loads([StreamSet(4, 1920, 1080, 30, "h265")], nano)
    assert ok.fits is True
    assert "36% of the decoder" in ok.verdict()


def test_software_only_and_unknown_codecs_are_said_not_judged() -> None:
    pi, nano = find_device("raspberry-pi-5"), find_device("jetson-orin-nano-8gb")
    (soft,) = decode_loads([StreamSet(1, 1920, 1080, 30, "h264")], pi)
    assert soft.fits is None
    assert "no h264 hardware decoder" in soft.verdict()
    (unknown,) = decode_loads([StreamSet(1, 1920, 1080, 30, "h264")], nano)
    assert unknown.fits is None
    assert "no decoder figure" in unknown.verdict()


def test_resolution() -> None:
    assert parse_resolution("1280X720") == (1280, 720)
    with pytest.raises(ValueError, match="WIDTHxHEIGHT"):
        parse_resolution("720p")
