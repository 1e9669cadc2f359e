"""The decode thread of a file, stream or camera: open, decode, and reopen when the input fails.

::

    connecting -> live -> stalled -> reconnecting -> connecting -> live ... -> ended

Every open and read has a deadline (``timeout_s``). A live input that stalls (no packet within
the deadline) or ends is reported, closed and reopened with capped exponential backoff, forever:
cameras come back. An open that fails in a way that trying again can mend is retried the same
way; any other failure ends the source with its error. A file ends (``ended``), or starts again
with ``loop``. Corrupt packets are skipped and counted.

When every frame of the pool is held, a live source drops the frame it just decoded (counted,
the camera goes on); a file waits.
"""

from __future__ import annotations

import logging
from typing import Any

import av.error

from edgepipe.media.chooser import DecoderChooser
from edgepipe.media.decode import StreamDecoder, describe_ffmpeg_error
from edgepipe.media.errors import SourceError
from edgepipe.media.frame import from_av
from edgepipe.media.outlet import Outlet
from edgepipe.media.pacing import Pacer
from edgepipe.media.url import SourceURL

log = logging.getLogger(__name__)


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
    ) -> None:
        self._outlet = outlet
        self._chooser = chooser
        self._src = src
        self._live = live
        self._loop = loop
        self._realtime = realtime
        self._timeout_s = timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s

    def run(self) -> None:
        """Open, decode and reopen until the input ends (a file, unless looped) or the source
        stops. Raises the :class:`SourceError` of an open that trying again cannot mend."""
        outlet, status = self._outlet, self._outlet.status
        backoff = self._backoff_initial_s
        attempt = 0
        while not outlet.stopped:
            outlet.set_state("connecting" if attempt == 0 else "reconnecting")
            attempt += 1
            try:
                opened = self._chooser.open()
            except SourceError as exc:
                if not exc.retryable:
                    raise
                status.reconnects += 1
                outlet.set_state("reconnecting", f"{exc}; retrying in {backoff:.2f} s")
                if outlet.wait(backoff):
                    return
                backoff = min(backoff * 2, self._backoff_max_s)
                continue
            status.note_decoder(opened.label, opened.why)
            decoder = opened.decoder
            try:
                outcome = self._pump(decoder)
            except _Stalled as stall:
                outlet.set_state("stalled", str(stall))
                status.reconnects += 1
                if outlet.wait(backoff):
                    return
                backoff = min(backoff * 2, self._backoff_max_s)
                continue
            finally:
                decoder.close()
            if outcome == "stopped":
                return
            backoff = self._backoff_initial_s
            if self._loop:  # a looped file, even one treated as a live camera
                attempt = 0
                continue
            if not self._live:
                outlet.set_state("ended", f"{status.decoded} frames, {status.corrupt} corrupt packets")
                return
            outlet.set_state("stalled", "stream ended")
            status.reconnects += 1

    def _pump(self, decoder: StreamDecoder) -> str:
        """Decode until the input ends ('eof'), the source stops ('stopped'); raise _Stalled."""
        outlet, status = self._outlet, self._outlet.status
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
                try:
                    frames = decoder.decode(packet)
                except av.error.FFmpegError:
                    status.corrupt += 1  # a damaged packet: skip it, the next keyframe heals
                    continue
                for av_frame in frames:
                    if pacer is not None:
                        pacer.pace(av_frame.time)
                    if not self._deliver(av_frame):
                        return "stopped"
        except av.error.ExitError as exc:
            raise _Stalled(f"no data within {self._timeout_s:g} s") from exc
        except (av.error.FFmpegError, OSError) as exc:
            if self._live or self._src.is_network:
                raise _Stalled(describe_ffmpeg_error(exc)) from exc
            status.corrupt += 1  # a truncated or damaged file: what was decoded stands
            log.warning("%s: stopped reading at a damaged spot: %s", outlet.url, describe_ffmpeg_error(exc))
        try:
            for av_frame in decoder.decode(None):
                if not self._deliver(av_frame):
                    return "stopped"
        except av.error.FFmpegError:
            status.corrupt += 1
        return "eof"

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
        if status.decoded % 30 == 1:
            status.update_gauges()
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
