"""The decode thread of a file, stream or camera: open, decode, and reopen when the input fails.

::

    connecting -> live -> stalled -> reconnecting -> connecting -> live ... -> ended

Every open and read has a deadline (``timeout_s``). A live input that stalls (no packet within
the deadline) or ends is reported, closed and reopened with capped exponential backoff, forever:
cameras come back. An open that fails in a way that trying again can mend is retried the same
way; any other failure ends the source with its error. A file ends (``ended``), or starts again
with ``loop``. Corrupt packets are skipped and counted.

Coming back fast: while it waits to retry, the decode thread knocks on the server's TCP port
(:meth:`~edgepipe.media.url.SourceURL.tcp_address`) every :data:`KNOCK_S`, if that port was
closed when the open failed; the moment it accepts again, the full open is tried, with the
backoff started over (a new server). A server that accepts but fails the open is only retried
at the backoff's pace: a knock is one connection, closed at once, never a full open.

A hardware decoder that fails on the stream is replaced in place (see
:mod:`~edgepipe.media.sources.failover`): logged once with its reason, counted (``decoder_failovers``),
and the source stays ``live``.

When every frame of the pool is held, a live source drops the frame it just decoded (counted,
the camera goes on); a file waits.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import av.error

from edgepipe.core.backoff import Backoff
from edgepipe.media.chooser import DecoderChooser, Opened
from edgepipe.media.decode import StreamDecoder, describe_ffmpeg_error
from edgepipe.media.errors import SourceError
from edgepipe.media.frame import from_av
from edgepipe.media.sources.failover import FAIL_AFTER, DecoderWatch
from edgepipe.media.sources.outlet import Outlet
from edgepipe.media.sources.pacing import Pacer
from edgepipe.media.url import SourceURL
from edgepipe.wire.redact import redact_url

log = logging.getLogger(__name__)

KNOCK_S = 0.25
"""How often a closed server port is tried while the source waits to reopen (and how long one
try may take)."""


class _Stalled(Exception):
    """The input gave no data in time, broke or ended while live: reopen it."""


class Reconnector:
    """Runs a decoded input in its source's decode thread (:meth:`run`, given to
    :meth:`Outlet.run`); reports through ``outlet`` only."""

    def __init__(
        self,
        outlet: Outlet,
        chooser: DecoderChooser,
        src: SourceURL,
        *,
        live: bool,
        loop: bool = False,
        realtime: bool = False,
        timeout_s: float = 5.0,
        backoff_initial_s: float = 0.25,
        backoff_max_s: float = 4.0,
        knock_s: float = KNOCK_S,
        fail_after: int = FAIL_AFTER,
    ) -> None:
        self._outlet = outlet
        self._chooser = chooser
        self._src = src
        self._live = live
        self._loop = loop
        self._realtime = realtime
        self._timeout_s = timeout_s
        self._backoff = Backoff(backoff_initial_s, backoff_max_s)
        self._knock_s = knock_s
        """0: no knocking, only the backoff."""
        self._fail_after = fail_after

    def run(self) -> None:
        """Open, decode and reopen until the input ends (a file, unless looped) or the source
        stops. Raises the :class:`SourceError` of an open that trying again cannot mend."""
        outlet, status = self._outlet, self._outlet.status
        self._backoff.reset()
        attempt = 0
        while not outlet.stopped:
            outlet.set_state("connecting" if attempt == 0 else "reconnecting")
            attempt += 1
            try:
                with outlet.opening_input():
                    opened = self._chooser.open()
            except SourceError as exc:
                if not exc.retryable:
                    raise
                status.reconnects += 1
                outlet.set_state("reconnecting", f"{exc}; retrying in {self._backoff.peek():.2f} s")
                if self._wait_to_retry():
                    return
                continue
            status.note_decoder(opened.label, opened.why)
            decoder = opened.decoder
            try:
                outcome = self._pump(opened)
            except _Stalled as stall:
                outlet.set_state("stalled", str(stall))
                status.reconnects += 1
                if self._wait_to_retry():
                    return
                continue
            finally:
                decoder.close()
            if outcome == "stopped":
                return
            self._backoff.reset()
            if self._loop:  # a looped file, even one treated as a live camera
                attempt = 0
                continue
            if not self._live:
                outlet.set_state("ended", f"{status.decoded} frames, {status.corrupt} corrupt packets")
                return
            outlet.set_state("stalled", "stream ended")
            status.reconnects += 1

    def _wait_to_retry(self) -> bool:
        """Wait the backoff's next delay before the next open, cut short when the server's port,
        closed now, accepts again (the backoff then starts over: a new server). True when the
        source was stopped meanwhile."""
        outlet = self._outlet
        backoff = self._backoff.next()
        address = self._src.tcp_address() if self._knock_s > 0 else None
        target = _resolve(address) if address is not None else None
        if target is None or _accepts(target, self._knock_s):
            return outlet.wait(backoff)
        deadline = time.monotonic() + backoff
        while (left := deadline - time.monotonic()) > 0:
            if outlet.wait(min(self._knock_s, left)):
                return True
            if _accepts(target, self._knock_s):
                log.debug("%s: the server's port accepts again; opening now", redact_url(outlet.url))
                self._backoff.reset()
                return False
        return False

    def _pump(self, opened: Opened) -> str:
        """Decode until the input ends ('eof'), the source stops ('stopped'); raise _Stalled."""
        outlet, status = self._outlet, self._outlet.status
        decoder = opened.decoder
        watch = DecoderWatch(self._fail_after, watching=opened.hardware)
        first = True
        pacer = Pacer(outlet.wait) if self._realtime else None
        try:
            for packet in decoder.packets():
                if outlet.stopped:
                    return "stopped"
                if first:
                    outlet.set_state("live")
                    first = False
                if packet.is_corrupt:
                    status.corrupt += 1
                watch.packet(packet)
                try:
                    frames = decoder.decode(packet)
                except av.error.FFmpegError as exc:
                    status.corrupt += 1  # a damaged packet: skip it, the next keyframe heals
                    if not watch.outcome(0, exc):
                        continue
                    frames = self._fail_over(decoder, watch)
                else:
                    if watch.outcome(len(frames), None):
                        frames = self._fail_over(decoder, watch)
                for av_frame in frames:
                    if pacer is not None:
                        pacer.pace(av_frame.time)
                    watch.delivered(av_frame)
                    if not self._deliver(av_frame):
                        return "stopped"
        except av.error.ExitError as exc:
            raise _Stalled(f"no data within {self._timeout_s:g} s") from exc
        except (av.error.FFmpegError, OSError) as exc:
            if self._live or self._src.is_network:
                raise _Stalled(describe_ffmpeg_error(exc)) from exc
            status.corrupt += 1  # a truncated or damaged file: what was decoded stands
            log.warning("%s: stopped reading at a damaged spot: %s", redact_url(outlet.url),
                        describe_ffmpeg_error(exc))  # fmt: skip
        try:
            for av_frame in decoder.decode(None):
                if not self._deliver(av_frame):
                    return "stopped"
        except av.error.FFmpegError:
            status.corrupt += 1
        return "eof"

    def _fail_over(self, decoder: StreamDecoder, watch: DecoderWatch) -> list[Any]:
        """The hardware decoder failed on this stream: the next candidate takes over in the
        open input, fed from the last keyframe. Frames of that replay not delivered yet."""
        outlet, status = self._outlet, self._outlet.status
        failed, reason = status.decoder_used, watch.reason
        opened = self._chooser.failover(decoder)
        if opened is None:  # nothing to fall back to: watch no more
            watch.restart(watching=False)
            return []
        status.corrupt -= watch.errors  # the decoder's failures, not damage in the stream
        status.note_failover(opened.label)
        log.warning("[%s] %s: decoder %s failed on this stream (%s); switched to %s, without reopening",
                    status.source_id, redact_url(outlet.url), failed, reason, opened.label)  # fmt: skip
        frames: list[Any] = []
        for packet in watch.restart(watching=opened.hardware):
            try:
                frames.extend(decoder.decode(packet))
            except av.error.FFmpegError:
                status.corrupt += 1
        return watch.fresh(frames)

    def _deliver(self, av_frame: Any) -> bool:
        """Hand one decoded frame to the loop; False once stopping."""
        outlet, status, pool = self._outlet, self._outlet.status, self._outlet.pool
        status.decoded += 1
        pool.plan(av_frame.width, av_frame.height)  # before a slot is taken: it may raise
        slot = self._slot()
        if slot is None:
            if outlet.stopped:
                return False
            status.dropped += 1
            status.update_gauges()
            return True
        frame = from_av(av_frame, source_id=status.source_id, seq=status.decoded, pool=pool, slot=slot)
        status.delivered += 1
        status.update_gauges()  # before the frame is out: decoded >= the node's out, always
        return outlet.post(frame)

    def _slot(self) -> int | None:
        pool = self._outlet.pool
        if self._live:
            return pool.try_acquire()
        while not self._outlet.stopped:
            slot = pool.acquire(timeout_s=0.2)
            if slot is not None:
                return slot
        return None


def _resolve(address: tuple[str, int]) -> Any:
    """The socket address to knock on (the first the name resolves to), or None."""
    try:
        infos = socket.getaddrinfo(*address, type=socket.SOCK_STREAM)
    except OSError:
        return None
    return infos[0] if infos else None


def _accepts(target: Any, timeout_s: float) -> bool:
    """Whether a TCP connection to ``target`` (a getaddrinfo entry) is accepted within
    ``timeout_s``; the connection is closed at once."""
    family, kind, proto, _name, sockaddr = target
    with socket.socket(family, kind, proto) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(sockaddr)
        except OSError:
            return False
    return True
