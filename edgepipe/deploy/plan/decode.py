"""Video decode load against a device's decoder limits (``edgepipe plan --streams N``).

The load is a pixel rate: streams x width x height x fps. A vendor states its decoder's limits
as lists of concurrent streams (``5x 1920x1080@60``, ``11x 1920x1080@30``); the capacity taken
is the largest pixel rate among them (the decoder's throughput, which the lists share), and the
streams that fit are that over one stream's rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgepipe.deploy.plan.devices import Device, StreamLimit

CODECS = {"h264": "h264", "avc": "h264", "h265": "h265", "hevc": "h265", "av1": "av1", "vp9": "vp9"}
"""Accepted names → the table's name for each codec."""
DEFAULT_WIDTH, DEFAULT_HEIGHT, DEFAULT_FPS, DEFAULT_CODEC = 1920, 1080, 30.0, "h264"
"""Streams planned by ``--streams N`` alone: 1080p30 H.264, the common camera."""


@dataclass(frozen=True)
class StreamSet:
    """``count`` streams of one size, rate and codec."""

    count: int
    width: int
    height: int
    fps: float
    codec: str
    origin: str = ""
    """Where it comes from (a pipeline's source node), empty for the flags."""

    @property
    def pixel_rate(self) -> float:
        return self.count * self.width * self.height * self.fps

    def __str__(self) -> str:
        return f"{self.count} x {self.width}x{self.height}@{self.fps:g} {self.codec}"


@dataclass(frozen=True)
class DecodeLoad:
    """What the streams of one codec ask of the device's decoder."""

    codec: str
    streams: tuple[StreamSet, ...]
    limits: tuple[StreamLimit, ...] | None
    """The vendor's figures; ``()``: no hardware decoder for it; None: the table has no figure."""

    @property
    def pixel_rate(self) -> float:
        return sum(s.pixel_rate for s in self.streams)

    @property
    def capacity(self) -> float | None:
        return max((lim.pixel_rate for lim in self.limits), default=None) if self.limits else None

    @property
    def load_frac(self) -> float | None:
        capacity = self.capacity
        return None if capacity is None else self.pixel_rate / capacity

    @property
    def fits(self) -> bool | None:
        frac = self.load_frac
        # Software decode only (limits == ()): the CPU pays, which this plan does not measure.
        return None if frac is None else frac <= 1.0

    def max_streams(self) -> int | None:
        """How many streams of the first set's size and rate the decoder takes."""
        capacity = self.capacity
        if capacity is None or not self.streams:
            return None
        one = self.streams[0]
        return math.floor(capacity / (one.width * one.height * one.fps))

    def verdict(self) -> str:
        total = sum(s.count for s in self.streams)
        if self.limits is None:
            return f"{self.codec}: {total} stream(s); the table has no decoder figure for {self.codec} here"
        if self.limits == ():
            return (
                f"{self.codec}: {total} stream(s); this device has no {self.codec} hardware decoder: "
                "they are decoded on the CPU"
            )
        frac = self.load_frac or 0.0
        best = max(self.limits, key=lambda lim: lim.pixel_rate)
        return (
            f"{self.codec}: {self.pixel_rate / 1e6:.1f} Mpixel/s of {(self.capacity or 0) / 1e6:.1f} "
            f"({best}): {frac:.0%} of the decoder"
        )


def decode_loads(streams: list[StreamSet], device: Device | None) -> list[DecodeLoad]:
    """The load per codec, in the order the codecs first appear."""
    loads = []
    for codec in dict.fromkeys(s.codec for s in streams):
        limits = None if device is None else device.decode.get(codec)
        loads.append(DecodeLoad(codec, tuple(s for s in streams if s.codec == codec), limits))
    return loads


def parse_resolution(text: str) -> tuple[int, int]:
    """``1920x1080`` → (1920, 1080); ValueError naming the form otherwise."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"expected WIDTHxHEIGHT (1920x1080), got {text!r}") from None
    if width <= 0 or height <= 0:
        raise ValueError(f"expected a positive WIDTHxHEIGHT, got {text!r}")
    return width, height
