"""The built-in table of edge devices ``edgepipe plan --device NAME`` plans against.

One TOML file per family in ``edgepipe/deploy/data/devices/``, each with a ``source`` line
naming the vendor documents its figures come from; a figure that is derived (a bus width times
a transfer rate) or uncertain is listed in the device's ``unsure`` and printed with a mark.
A figure a vendor does not state (the Pi's TOPS, an N100's decode limits) is left out, never
guessed: the plan then says it cannot judge that limit.

Each family (or device) names the ``edgepipe check-ops`` tables of what runs its models
(``ops_targets``); a device whose accelerator has none says what checks a model for it instead
(``ops_note``).

Decode limits are the vendor's lists of concurrent streams (``"5x1920x1080@60"``) per codec;
an empty list means the device decodes that codec in software only.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any


class UnknownDevice(ValueError):
    """A device name that is not in the table (the message suggests the nearest names)."""


@dataclass(frozen=True, slots=True)
class StreamLimit:
    """One of a vendor's concurrent-stream figures: ``count`` streams of width x height at fps."""

    count: int
    width: int
    height: int
    fps: float

    @property
    def pixel_rate(self) -> float:
        """Pixels per second all ``count`` streams decode together."""
        return self.count * self.width * self.height * self.fps

    def __str__(self) -> str:
        return f"{self.count}x {self.width}x{self.height}@{self.fps:g}"


@dataclass(frozen=True)
class Device:
    name: str
    title: str
    bandwidth_gb_s: float | None
    """Peak memory bandwidth, GB/s (10^9 bytes)."""
    ram_gb: float | None
    """Memory, GB (the module's or the smallest configuration's; ``--ram-gb`` overrides)."""
    compute_tops: float | None = None
    """Peak tera-operations per second as the vendor states them (see ``compute_note``)."""
    compute_note: str = ""
    decode: dict[str, tuple[StreamLimit, ...]] = field(default_factory=dict)
    """Per codec (h264, h265, av1): the vendor's stream limits; empty: software decode only."""
    accelerator: str = ""
    unsure: tuple[str, ...] = ()
    """The fields whose figures are derived or uncertain."""
    source: str = ""
    ops_targets: tuple[str, ...] = ()
    """The ``edgepipe check-ops --target`` tables of what runs its models (``rknn`` for an
    RK3588's NPU, ``cpu`` for a Raspberry Pi 5 alone), the accelerator's first."""
    ops_note: str = ""
    """Where its accelerator has no table: what checks a model for it instead."""


def parse_stream_limit(text: str) -> StreamLimit:
    """``"5x1920x1080@60"`` → 5 streams of 1920x1080 at 60 fps; ValueError if malformed."""
    try:
        count, rest = text.split("x", 1)
        size, fps = rest.split("@")
        width, height = size.split("x")
        limit = StreamLimit(int(count), int(width), int(height), float(fps))
    except ValueError:
        raise ValueError(f"a stream limit is COUNTxWIDTHxHEIGHT@FPS (5x1920x1080@60), not {text!r}") from None
    if min(limit.count, limit.width, limit.height) <= 0 or not limit.fps > 0:
        raise ValueError(f"a stream limit must be positive: {text!r}")
    return limit


def _device(entry: dict[str, Any], source: str, family: dict[str, Any]) -> Device:
    decode = {
        codec: tuple(parse_stream_limit(t) for t in limits)
        for codec, limits in entry.get("decode", {}).items()
    }
    return Device(
        name=entry["name"],
        title=entry.get("title", entry["name"]),
        bandwidth_gb_s=entry.get("bandwidth_gb_s"),
        ram_gb=entry.get("ram_gb"),
        compute_tops=entry.get("compute_tops"),
        compute_note=entry.get("compute_note", ""),
        decode=decode,
        accelerator=entry.get("accelerator", ""),
        unsure=tuple(entry.get("unsure", ())),
        source=source,
        ops_targets=tuple(entry.get("ops_targets", family.get("ops_targets", ()))),
        ops_note=entry.get("ops_note", ""),
    )


@cache
def devices() -> dict[str, Device]:
    """Every device of the table, by name (read once from the package's data files)."""
    found: dict[str, Device] = {}
    folder = resources.files("edgepipe.deploy") / "data" / "devices"
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if not item.name.endswith(".toml"):
            continue
        data = tomllib.loads(item.read_text(encoding="utf-8"))
        for entry in data.get("device", []):
            device = _device(entry, data["source"], data)
            found[device.name] = device
    return found


def devices_named(word: str) -> list[Device]:
    """The devices whose name is ``word`` or holds it (``hailo`` → the Raspberry Pi 5 with a
    Hailo-8L, and with a Hailo-8); case, ``-``, ``_`` and spaces do not matter."""
    key = word.strip().lower().replace("_", "").replace(" ", "").replace("-", "")
    if len(key) < 3:
        return []
    return [d for d in devices().values() if key in d.name.replace("-", "")]


def find_device(name: str) -> Device:
    """The device called ``name`` (case and ``_``/space for ``-`` do not matter); raises
    :class:`UnknownDevice` naming the closest names and how to list them all."""
    table = devices()
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise UnknownDevice(
        f"--device: no device {name!r} in the table; {hint}"
        "(edgepipe plan --list-devices lists them; or give --bandwidth-gb-s, --tops and --ram-gb)"
    )
