"""``VideoSource``: a file, stream, camera or synthetic scene as a pipeline source of Frames.

One decode thread per source reads and decodes; the event loop only receives finished frames.
Every open and read has a deadline (``timeout_s``). A live input that stalls (no packet within
the deadline) or ends is reported, closed and reopened with capped exponential backoff, forever:
cameras come back. Corrupt packets are skipped and counted. The source's state is a gauge
(``--stats``), a log line and a ``source_state`` result message::

    connecting -> live -> stalled -> reconnecting -> connecting -> live ... -> ended

Frames are leased from a bounded pool. Its default size is what the consumers can hold at once
(each consumer's queue plus the frame it is working on) plus the one being decoded; with a
``latest`` queue of one frame per consumer that is "2 per consumer + 1": double buffering. When
every frame is held, a live source drops the frame it just decoded (counted, the camera goes
on); a file waits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import av.error

from edgepipe.core.context import current_node
from edgepipe.core.memory import MemoryBudgetError
from edgepipe.media import hw
from edgepipe.media.decode import StreamDecoder, describe_ffmpeg_error
from edgepipe.media.errors import DecoderError, SourceError
from edgepipe.media.frame import Frame, FramePool, from_av, from_planes, nv12_views
from edgepipe.media.handoff import Handoff
from edgepipe.media.probe import choose, try_decoder
from edgepipe.media.synthetic import Scene
from edgepipe.media.url import SYNTHETIC_DEFAULT, SourceURL, parse

log = logging.getLogger(__name__)

STATES = ("connecting", "live", "stalled", "reconnecting", "ended")


class _Stalled(Exception):
    pass


class VideoSource:
    """Frames from ``url`` (see :mod:`edgepipe.media.url` for what URLs mean).

    Use as a pipeline source: ``p.source("camera", VideoSource(url))``. Its consumers should
    read live video through a ``latest`` channel (``policy="latest", queue_size=1``).
    """

    def __init__(
        self,
        url: str = SYNTHETIC_DEFAULT,
        *,
        decoder: str = "auto",
        timeout_s: float = 5.0,
        realtime: bool = False,
        loop: bool = False,
        rtsp_transport: str = "tcp",
        pool_size: int | None = None,
        live: bool | None = None,
        backoff_initial_s: float = 0.25,
        backoff_max_s: float = 4.0,
        options: dict[str, str] | None = None,
    ) -> None:
        self.src: SourceURL = parse(url)
        if rtsp_transport not in ("tcp", "udp"):
            raise SourceError(f"rtsp_transport must be tcp or udp, not {rtsp_transport!r}", url=url)
        self.url = url
        self.decoder = decoder
        self.timeout_s = timeout_s
        self.realtime = realtime
        self.loop = loop
        self.rtsp_transport = rtsp_transport
        self.pool_size = pool_size
        self.live = self.src.live if live is None else live
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.options = dict(options or {})
        # Counters, written by the decode thread, read anywhere (ints: no lock needed to read).
        self.decoded = 0
        self.delivered = 0
        self.dropped = 0
        self.corrupt = 0
        self.reconnects = 0
        # One tuple, replaced whole by the decode thread: a reader never pairs a state with
        # another state's reason.
        self._state: tuple[str, str] = ("idle", "")
        self.decoder_used = ""
        self.pool: FramePool | None = None
        self._handoff: Handoff | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._source_id = url
        self._gauges: dict[str, Any] = {}
        self._emit_event: Any = None
        self._prepared: StreamDecoder | None = None

    def __repr__(self) -> str:
        return f"VideoSource({self.url!r})"

    @property
    def state(self) -> str:
        """connecting, live, stalled, reconnecting, ended (idle before start)."""
        return self._state[0]

    @property
    def state_reason(self) -> str:
        """Why the source is in its state ("read timed out", ...): empty when live."""
        return self._state[1]

    @property
    def state_info(self) -> tuple[str, str]:
        """(state, reason), read together."""
        return self._state

    @property
    def source_id(self) -> str:
        """The id its frames carry: the node's id once started in a pipeline, else the URL."""
        return self._source_id

    # -- lifecycle (node hooks) ---------------------------------------------------------------

    async def start(self) -> None:
        """Size the pool from the consumers, then start the decode thread. A file is checked
        first, so a missing or broken file fails at start-up with its name."""
        consumers_hold = 2
        try:
            ctx = current_node()
        except RuntimeError:  # used outside a pipeline
            ctx = None
        if ctx is not None:
            self._source_id = ctx.node_id
            self._gauges = ctx.gauges
            self._emit_event = ctx.emit_event
            consumers_hold = sum(size + 1 for size in ctx.consumer_queue_sizes) or 2
        capacity = self.pool_size or consumers_hold + 1
        self.pool = FramePool(capacity, name=self._source_id)
        loop = asyncio.get_running_loop()
        if self.src.kind == "file":
            await loop.run_in_executor(None, self._check_file)
        self._handoff = Handoff(loop)
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"edgepipe-decode-{self._source_id}", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        """Stop the decode thread (within ``timeout_s``: reads are bounded) and free its frames."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, self.timeout_s + 1.0)
            if thread.is_alive():
                log.warning(
                    "%s: decode thread did not stop within %.1f s; abandoned", self.url, self.timeout_s + 1
                )
        if self._handoff is not None:
            self._handoff.drain()
        if self._prepared is not None:  # started but never ran
            self._prepared.close()
            self._prepared = None

    async def __aiter__(self) -> AsyncIterator[Frame]:
        handoff = self._handoff
        if handoff is None:
            raise RuntimeError("VideoSource.start() was not called (run it as a pipeline source)")
        while True:
            kind, payload = await handoff.get()
            if kind == "frame":
                yield payload
            elif kind == "state":
                await self._report_state(*payload)
            elif kind == "error":
                raise payload
            elif kind == "end":
                return

    # -- reporting ----------------------------------------------------------------------------

    async def _report_state(self, state: str, reason: str) -> None:
        self._gauges["source"] = state
        level = logging.INFO if state in ("connecting", "live", "ended") else logging.WARNING
        log.log(level, "[%s] %s: %s%s", self._source_id, self.url, state, f" ({reason})" if reason else "")
        if self._emit_event is not None:
            await self._emit_event("source_state", {"source": self._source_id, "url": self.url,
                                                    "state": state, "reason": reason})  # fmt: skip

    def _set_state(self, state: str, reason: str = "") -> None:
        if state == self.state and not reason:
            return
        self._state = (state, reason)
        self._update_gauges()
        assert self._handoff is not None
        self._handoff.post("state", (state, reason))

    def _update_gauges(self) -> None:
        g = self._gauges
        g["decoded"] = self.decoded
        if self.dropped:
            g["pool_drops"] = self.dropped
        if self.corrupt:
            g["corrupt"] = self.corrupt
        if self.reconnects:
            g["reconnects"] = self.reconnects

    # -- the decode thread --------------------------------------------------------------------

    def _check_file(self) -> None:
        """Open the file once at start-up, so that a bad one fails with its name before anything
        runs; the decode thread then starts from this open input instead of opening it again."""
        decoder = StreamDecoder(self.src, timeout_s=self.timeout_s, options=self.options)
        decoder.open()
        self._prepared = decoder

    def _run(self) -> None:
        assert self._handoff is not None
        try:
            if self.src.kind == "synthetic":
                self._run_synthetic()
            else:
                self._run_decoder()
        except SourceError as exc:
            self._handoff.post("error", exc)
            return
        except MemoryBudgetError as exc:
            self._handoff.post("error", SourceError(str(exc), url=self.url, retryable=False))
            return
        except Exception as exc:  # a bug or an FFmpeg surprise: name the source, keep the cause
            log.exception("%s: decode thread failed", self.url)
            self._handoff.post(
                "error", SourceError(f"decode thread failed: {exc!r}", url=self.url, retryable=True)
            )
            return
        self._handoff.post("end", None)

    def _wait(self, seconds: float) -> bool:
        """Sleep unless stopped; True if stopped."""
        return self._stop.wait(seconds)

    def _run_decoder(self) -> None:
        backoff = self.backoff_initial_s
        attempt = 0
        while not self._stop.is_set():
            self._set_state("connecting" if attempt == 0 else "reconnecting")
            attempt += 1
            try:
                decoder = self._open()
            except SourceError as exc:
                if not exc.retryable:
                    raise
                self.reconnects += 1
                self._set_state("reconnecting", f"{exc}; retrying in {backoff:.2f} s")
                if self._wait(backoff):
                    return
                backoff = min(backoff * 2, self.backoff_max_s)
                continue
            try:
                outcome = self._pump(decoder)
            except _Stalled as stall:
                self._set_state("stalled", str(stall))
                self.reconnects += 1
                if self._wait(backoff):
                    return
                backoff = min(backoff * 2, self.backoff_max_s)
                continue
            finally:
                decoder.close()
            if outcome == "stopped":
                return
            backoff = self.backoff_initial_s
            if not self.live:
                if self.loop:
                    attempt = 0
                    continue
                self._set_state("ended", f"{self.decoded} frames, {self.corrupt} corrupt packets")
                return
            self._set_state("stalled", "stream ended")
            self.reconnects += 1

    def _open(self) -> StreamDecoder:
        """Open the input with the chosen decoder; a hardware decoder that fails to open falls
        back to software with one warning."""
        software, self._prepared = self._prepared, None
        if software is None:
            software = StreamDecoder(self.src, timeout_s=self.timeout_s, rtsp_transport=self.rtsp_transport,
                                     options=self.options)  # fmt: skip
            software.open()  # first in software: it tells the codec, and it is the fallback anyway
        codec = software.codec
        if self.decoder == "auto":
            choice, why = choose(codec)
        else:
            choice, why = hw.parse_choice(codec, self.decoder) or hw.DecoderChoice(codec), "as configured"
        if not choice.is_hardware:
            self._note_decoder(f"{codec} (software)", why if self.decoder == "auto" else "")
            return software
        if self.decoder != "auto":
            # An asked-for decoder is tried on a small clip first: some fail only at the first
            # packet (a CUDA decoder without a GPU), which would otherwise look like corruption.
            trial = try_decoder(codec, choice)
            if not trial.works:
                reason = f"{choice.label} cannot decode {codec} here: {trial.reason}"
                self._note_decoder(f"{codec} (software)", reason)
                return software
        software.close()
        hardware = StreamDecoder(self.src, choice=choice, timeout_s=self.timeout_s,
                                 rtsp_transport=self.rtsp_transport, options=self.options)  # fmt: skip
        try:
            hardware.open()
        except DecoderError as exc:
            software.open()
            self._note_decoder(f"{codec} (software)", str(exc))
            return software
        self._note_decoder(choice.label, why)
        return hardware

    def _note_decoder(self, label: str, why: str) -> None:
        if label == self.decoder_used:
            return
        self.decoder_used = label
        self._gauges["decoder"] = label
        if "software" in label and why:
            log.warning("[%s] decoding %s: %s", self._source_id, label, why)
        else:
            log.info("[%s] decoding with %s", self._source_id, label)

    def _pump(self, decoder: StreamDecoder) -> str:
        """Decode until the input ends ('eof'), the source stops ('stopped'); raise _Stalled."""
        first = True
        t_origin: float | None = None
        try:
            for packet in decoder.packets():
                if self._stop.is_set():
                    return "stopped"
                if first:
                    self._set_state("live")
                    first = False
                if packet.is_corrupt:
                    self.corrupt += 1
                try:
                    frames = decoder.decode(packet)
                except av.error.FFmpegError:
                    self.corrupt += 1  # a damaged packet: skip it, the next keyframe heals
                    continue
                for av_frame in frames:
                    if self.realtime and not self.live:
                        t_origin = self._pace(av_frame, t_origin)
                    if not self._deliver(av_frame):
                        return "stopped"
        except av.error.ExitError as exc:
            raise _Stalled(f"no data within {self.timeout_s:g} s") from exc
        except (av.error.FFmpegError, OSError) as exc:
            if self.live or self.src.is_network:
                raise _Stalled(describe_ffmpeg_error(exc)) from exc
            self.corrupt += 1  # a truncated or damaged file: what was decoded stands
            log.warning("%s: stopped reading at a damaged spot: %s", self.url, describe_ffmpeg_error(exc))
        try:
            for av_frame in decoder.decode(None):
                if not self._deliver(av_frame):
                    return "stopped"
        except av.error.FFmpegError:
            self.corrupt += 1
        return "eof"

    def _pace(self, av_frame: Any, t_origin: float | None) -> float:
        t: float | None = av_frame.time
        now = time.monotonic()
        if t is None:
            return now if t_origin is None else t_origin
        if t_origin is None:
            return now - t
        delay = t_origin + t - now
        if delay > 0:
            self._wait(delay)
        return t_origin

    def _deliver(self, av_frame: Any) -> bool:
        """Hand one decoded frame to the loop; False once stopping."""
        assert self.pool is not None
        assert self._handoff is not None
        self.decoded += 1
        self.pool.plan(av_frame.width, av_frame.height)  # before a slot is taken: it may raise
        slot = self._slot()
        if slot is None:
            if self._stop.is_set():
                return False
            self.dropped += 1
            self._update_gauges()
            return True
        frame = from_av(av_frame, source_id=self._source_id, seq=self.decoded, pool=self.pool, slot=slot)
        self.delivered += 1
        if self.decoded % 30 == 1:
            self._update_gauges()
        if not self._handoff.post("frame", frame):
            frame.release()
            return False
        return True

    def _slot(self) -> int | None:
        assert self.pool is not None
        if self.live:
            return self.pool.try_acquire()
        while not self._stop.is_set():
            slot = self.pool.acquire(timeout_s=0.2)
            if slot is not None:
                return slot
        return None

    def _run_synthetic(self) -> None:
        assert self.pool is not None
        assert self._handoff is not None
        src = self.src
        scene = Scene(src.width, src.height)
        nbytes = src.width * src.height * 3 // 2
        self.pool.plan(src.width, src.height)
        interval = 1.0 / src.fps
        self._note_decoder("synthetic", "")
        self._set_state("live")
        t_next = time.monotonic()
        i = 0
        while not self._stop.is_set():
            self.decoded += 1
            slot = self.pool.try_acquire()
            if slot is None:
                self.dropped += 1  # consumers hold every frame: skip this one (a camera would)
            else:
                y, uv = nv12_views(self.pool.buffer(slot, nbytes), src.width, src.height)
                scene.draw(i, y, uv)
                frame = from_planes(y, uv, source_id=self._source_id, seq=self.decoded, pts=i,
                                    time_base=None, pool=self.pool, slot=slot)  # fmt: skip
                self.delivered += 1
                if not self._handoff.post("frame", frame):
                    frame.release()
                    return
            if self.decoded % 30 == 1:
                self._update_gauges()
            i += 1
            t_next += interval
            delay = t_next - time.monotonic()
            if delay < -1.0:
                t_next = time.monotonic()  # fell far behind (a paused machine): do not burst
            elif delay > 0 and self._wait(delay):
                return
