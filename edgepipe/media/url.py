"""What a source URL means: which kind of input, whether it is live, how to open it.

=========================================  ======================================  =====
URL                                        kind                                    live
=========================================  ======================================  =====
``clip.mp4``, ``/data/x.h264``, file://…   file (mp4, mkv, ts, raw .h264/.h265 …)  no
``rtsp://``, ``rtsps://``                  rtsp (TCP by default, UDP on request)    yes
``rtmp://``, ``srt://``, ``udp://`` …      stream                                  yes
``http(s)://…m3u8``                        hls                                     yes
``http(s)://…`` (other)                    http                                    no
``/dev/video0``, ``v4l2:///dev/video0``    v4l2 camera                             yes
``synthetic://640x480@15``                 synthetic moving scene, in-process      yes
=========================================  ======================================  =====

Live inputs pace themselves; when consumers fall behind, their newest decoded frame is dropped
(and counted) rather than stalling the camera. Files are read as fast as consumers take frames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from edgepipe.media.errors import SourceError

_STREAM_SCHEMES = {"rtmp", "rtmps", "srt", "udp", "rtp", "tcp"}
_TCP_PORTS = {"rtsp": 554, "rtsps": 322, "http": 80, "https": 443, "rtmp": 1935, "rtmps": 443}
"""Default TCP ports of the schemes whose servers answer on TCP (udp://, srt://, rtp:// do not;
tcp:// names its port)."""
_SYNTHETIC = re.compile(r"^synthetic://(?:(\d+)x(\d+))?(?:@(\d+(?:\.\d+)?))?/?$")
SYNTHETIC_DEFAULT = "synthetic://640x480@15"


@dataclass(frozen=True, slots=True)
class SourceURL:
    """A parsed source URL."""

    url: str
    """As given (used in every message about the source)."""
    kind: str
    """``file``, ``rtsp``, ``stream``, ``hls``, ``http``, ``v4l2`` or ``synthetic``."""
    live: bool
    """Whether the input runs in real time whether or not anyone reads it."""
    target: str
    """What FFmpeg opens: a path, a URL or a device node."""
    width: int = 0
    """Synthetic only: frame size and rate."""
    height: int = 0
    fps: float = 0.0

    @property
    def is_network(self) -> bool:
        return self.kind in ("rtsp", "stream", "hls", "http")

    def tcp_address(self) -> tuple[str, int] | None:
        """Where a TCP connection to the input's server goes, (host, port), the scheme's
        default port when the URL names none (rtsp 554, http 80, rtmp 1935 …); None for an
        input with no TCP server to ask (a file, a camera, UDP, SRT)."""
        if not self.is_network:
            return None
        parts = urlsplit(self.url)
        scheme = parts.scheme.lower()
        if scheme in ("udp", "srt", "rtp"):
            return None
        default = _TCP_PORTS.get(scheme)
        try:
            port = parts.port or default
        except ValueError:  # a port that is not a number: the open says so
            return None
        if not parts.hostname or port is None:
            return None
        return parts.hostname, port


def parse(url: str) -> SourceURL:
    """Parse ``url``; raise :class:`SourceError` naming it if it cannot be a video source."""
    if not isinstance(url, str) or not url.strip():
        raise SourceError(
            "empty source; give a file path, rtsp://…, /dev/videoN or synthetic://WxH@FPS", url=str(url)
        )
    url = url.strip()
    if url.startswith("synthetic://"):
        m = _SYNTHETIC.match(url)
        if m is None:
            raise SourceError("expected synthetic://WIDTHxHEIGHT@FPS, e.g. synthetic://640x480@15", url=url)
        width = int(m.group(1) or 640)
        height = int(m.group(2) or 480)
        fps = float(m.group(3) or 15)
        if width < 16 or height < 16 or width % 2 or height % 2 or not 0 < fps <= 240:
            raise SourceError("size must be even and at least 16x16, fps between 0 and 240", url=url)
        return SourceURL(url, "synthetic", True, url, width, height, fps)
    if url.startswith("/dev/video"):
        return SourceURL(url, "v4l2", True, url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "v4l2":
        return SourceURL(url, "v4l2", True, parts.path or parts.netloc)
    if scheme in ("", "file") or (len(scheme) == 1 and url[1:3] in (":\\", ":/")):  # C:\ on Windows
        path = parts.path if scheme == "file" else url
        return SourceURL(url, "file", False, path)
    if scheme in ("rtsp", "rtsps"):
        return SourceURL(url, "rtsp", True, url)
    if scheme in _STREAM_SCHEMES:
        return SourceURL(url, "stream", True, url)
    if scheme in ("http", "https"):
        hls = parts.path.lower().endswith(".m3u8")
        return SourceURL(url, "hls" if hls else "http", hls, url)
    raise SourceError(
        f"unsupported URL scheme '{scheme}'; use a file path, rtsp://, http(s)://, rtmp://, srt://, "
        "/dev/videoN or synthetic://WxH@FPS",
        url=url,
    )
