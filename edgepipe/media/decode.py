"""Opening an input and decoding its video stream, with deadlines and hardware decoders.

:class:`StreamDecoder` is used from one thread (a source's decode thread, or ``edgepipe probe``).
Every blocking FFmpeg call is bounded: PyAV's ``timeout`` installs an interrupt callback that
aborts an open or a read that waits longer than ``timeout_s``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import av
import av.error

from edgepipe.core import threadname
from edgepipe.core.native import Native
from edgepipe.media import hw
from edgepipe.media.errors import DecoderError, SourceError
from edgepipe.media.url import SourceURL
from edgepipe.sched.budget import cpu_budget
from edgepipe.wire.redact import redact_url

log = logging.getLogger(__name__)

WRAPPABLE = {"yuv420p", "yuvj420p", "nv12"}
"""Pixel formats a Frame can view without conversion."""


def describe_ffmpeg_error(exc: BaseException) -> str:
    """FFmpeg's words without the errno noise: 'Connection refused', 'Invalid data found …'."""
    if isinstance(exc, av.error.FFmpegError):
        return str(exc.strerror or exc).strip()
    text = str(exc)
    return text or type(exc).__name__


def open_error(src: SourceURL, exc: BaseException, timeout_s: float, elapsed_s: float = 0.0) -> SourceError:
    """A clear SourceError for a failed open; network failures are retryable. ``elapsed_s``:
    how long the open took (one cut short by its deadline says so, whatever FFmpeg said)."""
    url = src.url
    if src.is_network and elapsed_s >= timeout_s * 0.95:
        # An RTSP server that accepts the connection and says nothing: FFmpeg's RTSP client
        # reports the interrupted read as "Invalid data found when processing input".
        address = src.tcp_address()
        server = f"the server at {address[0]}:{address[1]}" if address else "the server"
        return SourceError(
            f"no answer within {timeout_s:g} s (the open timed out); check that {server} is up and "
            f"serves this URL, or give it longer with timeout_s",
            url=url,
            retryable=True,
        )
    if isinstance(exc, av.error.FileNotFoundError) and src.kind == "file":
        return SourceError("no such file", url=url)
    if isinstance(exc, av.error.InvalidDataError) and src.kind == "file":
        return SourceError(
            "not a video file FFmpeg can read (Invalid data found when processing input)", url=url
        )
    if isinstance(exc, av.error.ExitError | TimeoutError):
        return SourceError(f"no answer within {timeout_s:g} s", url=url, retryable=True)
    if isinstance(exc, av.error.PermissionError | PermissionError) and src.kind in ("file", "v4l2"):
        return SourceError("permission denied", url=url)
    reason = describe_ffmpeg_error(exc)
    return SourceError(f"cannot open: {reason}", url=url, retryable=src.live or src.is_network)


def copy_colour_tags(source: Any, ctx: Any) -> None:
    """Give a named decoder's context the stream's colour tags: a container's (MP4 ``colr``)
    reach only the stream's own context, and a bitstream need not repeat them, so without this
    its frames would say nothing and be read by the guess."""
    ctx.colorspace, ctx.color_range = source.colorspace, source.color_range
    ctx.color_primaries, ctx.color_trc = source.color_primaries, source.color_trc


class StreamDecoder:
    """One open input and the decoder of its first video stream."""

    def __init__(
        self,
        src: SourceURL,
        *,
        choice: hw.DecoderChoice | None = None,
        timeout_s: float = 5.0,
        rtsp_transport: str = "tcp",
        options: dict[str, str] | None = None,
    ) -> None:
        self.src = src
        self.choice = choice
        self.timeout_s = timeout_s
        self.rtsp_transport = rtsp_transport
        self.options = dict(options or {})
        self.container: Any = None
        self.stream: Any = None
        self._ctx: Any = None  # a named decoder's context, else the stream's own
        self._converting: str | None = None

    # -- opening ------------------------------------------------------------------------------

    def _container_options(self) -> dict[str, str]:
        opts = dict(self.options)
        if self.src.kind == "rtsp":
            opts.setdefault("rtsp_transport", self.rtsp_transport)
        return opts

    def open(self) -> None:
        """Open the input and its decoder. Raises :class:`SourceError` (or DecoderError)."""
        src = self.src
        if src.kind == "file" and not os.path.exists(src.target):
            raise SourceError("no such file", url=src.url)
        if src.kind == "v4l2" and not os.path.exists(src.target):
            raise SourceError("no such camera device", url=src.url, retryable=True)
        fmt = "v4l2" if src.kind == "v4l2" else None
        hwaccel = self.choice.hwaccel_settings() if self.choice is not None else None
        t0 = time.monotonic()
        try:
            # A stop does not wait for an open (FFmpeg cannot cut it short before its deadline):
            # the process must not finalize under it (a crash at exit, -11, in about one stop in 20).
            with Native(f"opening {redact_url(src.url)}", wait=False):
                self.container = av.open(
                    src.target,
                    format=fmt,
                    options=self._container_options(),
                    timeout=(self.timeout_s, self.timeout_s),
                    hwaccel=hwaccel,
                )
        except (av.error.FFmpegError, OSError, RuntimeError) as exc:
            if hwaccel is not None and isinstance(exc, RuntimeError | av.error.PermissionError):
                label = self.choice.label if self.choice else "hardware"
                raise DecoderError(
                    f"{label} cannot decode here: {describe_ffmpeg_error(exc)}",
                    url=src.url,
                    codec=self.choice.codec if self.choice else "?",
                    decoder=self.choice.label if self.choice else None,
                ) from exc
            raise open_error(src, exc, self.timeout_s, time.monotonic() - t0) from exc
        video = self.container.streams.video
        if not video:
            self.close()
            raise SourceError("has no video stream", url=src.url)
        self.stream = video[0]
        if self.stream.codec_context is None or self.stream.codec_context.codec is None:
            tag = getattr(self.stream.codec_context, "codec_tag", None) or "unknown"
            self.close()
            raise DecoderError(
                f"its video codec ({tag}) has no decoder in this FFmpeg build; transcode it to H.264",
                url=src.url,
                codec=str(tag),
            )
        self.stream.thread_type = "AUTO"
        self.stream.codec_context.thread_count = cpu_budget().decoder_threads
        codec = self.stream.codec_context.name
        if self.choice is not None and self.choice.decoder:
            try:
                ctx = av.codec.CodecContext.create(self.choice.decoder, "r")
                ctx.extradata = self.stream.codec_context.extradata
                copy_colour_tags(self.stream.codec_context, ctx)
                self._ctx = ctx
            except (av.error.FFmpegError, ValueError) as exc:
                self.close()
                raise DecoderError(
                    f"decoder {self.choice.decoder} cannot open here: {describe_ffmpeg_error(exc)}",
                    url=src.url,
                    codec=codec,
                    decoder=self.choice.decoder,
                ) from exc
        else:
            self._ctx = self.stream.codec_context
        if self._ctx is None or codec is None:
            self.close()
            raise DecoderError(
                "no decoder for this stream's codec in this FFmpeg build", url=src.url, codec="?"
            )

    def switch(self, choice: hw.DecoderChoice) -> None:
        """Decode the open input's next packets with ``choice`` (a hardware decoder that failed
        mid-stream is replaced this way, without reopening the input). The new decoder starts
        from the stream's parameters: feed it from a keyframe. Raises :class:`DecoderError`."""
        params = self.stream.codec_context
        codec = str(params.name)
        try:
            ctx = av.codec.CodecContext.create(
                choice.decoder or codec, "r", hwaccel=choice.hwaccel_settings()
            )
            ctx.extradata = params.extradata
            copy_colour_tags(params, ctx)  # tags kept in the container only are not lost
            if not choice.is_hardware:
                ctx.thread_type = "AUTO"
                ctx.thread_count = cpu_budget().decoder_threads
        except (av.error.FFmpegError, OSError, RuntimeError, ValueError) as exc:
            raise DecoderError(
                f"{choice.label} cannot decode here: {describe_ffmpeg_error(exc)}",
                url=self.src.url,
                codec=codec,
                decoder=choice.label,
            ) from exc
        self._ctx = ctx
        self.choice = choice

    @property
    def codec(self) -> str:
        return str(self.stream.codec_context.name) if self.stream is not None else "?"

    # -- decoding -----------------------------------------------------------------------------

    def packets(self) -> Iterator[Any]:
        """Demux the video stream's packets; the empty flush packet at the end is skipped."""
        for packet in self.container.demux(self.stream):
            if packet.size:
                yield packet

    def decode(self, packet: Any | None) -> list[Any]:
        """Frames from one packet (None flushes). Raises av's InvalidDataError on bad data."""
        ctx = self._ctx
        if not ctx.is_open:
            # Opened here rather than inside decode(): the codec's threads start now, and are
            # claimed for the calling thread's tag (a source's decode thread: the CPU ledger).
            with threadname.native_threads():
                ctx.open(strict=False)
        frames = ctx.decode(packet)
        return [self._wrappable(f) for f in frames]

    def _wrappable(self, frame: Any) -> Any:
        name = frame.format.name
        if name in WRAPPABLE:
            return frame
        if self._converting != name:
            self._converting = name
            log.warning("%s: decoder gives %s; converting to NV12 (one copy per frame)",
                        redact_url(self.src.url), name)  # fmt: skip
        return frame.reformat(format="nv12")

    def close(self) -> None:
        threadname.ending()  # the codec's threads end with it: the CPU ledger's last look at them
        container, self.container = self.container, None
        self.stream = None
        self._ctx = None
        if container is not None:
            with contextlib.suppress(av.error.FFmpegError, OSError):  # a broken stream may not close
                container.close()
