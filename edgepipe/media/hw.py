"""Hardware decoders: which ones this build of FFmpeg knows, and which ones work here.

Two ways to decode on hardware exist in FFmpeg, and edgepipe tries both:

- a *hwaccel device* (``cuda``, ``vaapi``, ``qsv``, ``videotoolbox``, ``d3d11va``,
  ``mediacodec`` …) attached to the ordinary decoder;
- a *named hardware decoder* (``h264_cuvid``, ``h264_qsv``, ``h264_v4l2m2m`` on Raspberry Pi
  and other V4L2 M2M boards, ``h264_mediacodec`` on Android).

``decoder="auto"`` tries them in :data:`PREFERENCE` order for the stream's codec, keeps the first
that decodes a frame, and otherwise decodes in software with one warning that says why. The
result is cached per codec for the life of the process.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import av
from av.codec.hwaccel import HWAccel, hwdevices_available

log = logging.getLogger(__name__)

PREFERENCE: tuple[str, ...] = (
    "cuda",
    "cuvid",
    "vaapi",
    "qsv",
    "videotoolbox",
    "d3d11va",
    "mediacodec",
    "v4l2m2m",
    "drm",
)
"""Order of preference: a word is a hwaccel device type or a decoder-name suffix (h264_cuvid)."""

SOFTWARE = "software"


@dataclass(frozen=True, slots=True)
class DecoderChoice:
    """How to decode one codec: a hwaccel device, a named decoder, or software."""

    codec: str
    """The stream's codec (``h264``, ``hevc`` …)."""
    hwaccel: str | None = None
    """A hwaccel device type to attach, e.g. ``cuda``."""
    decoder: str | None = None
    """A named decoder to use instead of the default one, e.g. ``h264_v4l2m2m``."""

    @property
    def label(self) -> str:
        if self.hwaccel:
            return f"{self.codec}+{self.hwaccel}"
        return self.decoder or f"{self.codec} ({SOFTWARE})"

    @property
    def is_hardware(self) -> bool:
        return self.hwaccel is not None or self.decoder is not None

    def hwaccel_settings(self) -> HWAccel | None:
        if self.hwaccel is None:
            return None
        return HWAccel(self.hwaccel, allow_software_fallback=False)


def candidates(codec: str) -> list[DecoderChoice]:
    """Every hardware way this FFmpeg build knows for ``codec``, in preference order."""
    devices = set(hwdevices_available())
    named = {name for name in av.codecs_available if name.startswith(codec + "_")}
    out: list[DecoderChoice] = []
    for word in PREFERENCE:
        if word in devices:
            out.append(DecoderChoice(codec, hwaccel=word))
        name = f"{codec}_{word}"
        if name in named:
            out.append(DecoderChoice(codec, decoder=name))
    return out


def parse_choice(codec: str, decoder: str) -> DecoderChoice | None:
    """An explicit ``decoder=`` value: ``software``, a device type, or a decoder name.
    None means ``auto``."""
    if decoder == "auto":
        return None
    if decoder == SOFTWARE:
        return DecoderChoice(codec)
    if decoder in hwdevices_available():
        return DecoderChoice(codec, hwaccel=decoder)
    return DecoderChoice(codec, decoder=decoder)


_cache: dict[str, tuple[DecoderChoice, str]] = {}
_cache_lock = threading.Lock()


def remember(codec: str, choice: DecoderChoice, why: str) -> None:
    with _cache_lock:
        _cache[codec] = (choice, why)


def remembered(codec: str) -> tuple[DecoderChoice, str] | None:
    with _cache_lock:
        return _cache.get(codec)
