"""``VideoSource``: a file, stream, camera or synthetic scene as a pipeline source of Frames.

One decode thread per source reads and decodes; the event loop only receives finished frames.
Every open and read has a deadline (``timeout_s``). A live input that stalls or ends is
reported, closed and reopened with capped exponential backoff, forever: cameras come back (see
:mod:`edgepipe.media.sources.reconnect`). Corrupt packets are skipped and counted. The source's state is
a gauge (``--stats``), a log line and a ``source_state`` result message::

    connecting -> live -> stalled -> reconnecting -> connecting -> live ... -> ended

Frames are leased from a bounded pool. Its default size is what the consumers can hold at once
(each consumer's lane plus what it has in hand: the frame it works on, and the next one when it
prepares that meanwhile, as a Detector does) plus the one being decoded; with a ``latest`` lane
of one frame that is 2 per plain consumer and 3 per detector, + 1. When every frame is held, a
live source drops the frame it just decoded (counted, the camera goes on); a file waits.

The pieces: :mod:`~edgepipe.media.chooser` picks and opens the decoder,
:mod:`~edgepipe.media.sources.reconnect` (or :func:`edgepipe.media.sources.synthetic.play`) runs in the decode
thread, :mod:`~edgepipe.media.sources.pacing` keeps time there, and both report through an
:class:`~edgepipe.media.sources.outlet.Outlet` into a :class:`~edgepipe.media.status.SourceStatus`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from edgepipe.core import threadname
from edgepipe.core.context import current_node
from edgepipe.core.cputime import DECODE
from edgepipe.core.executor import DaemonThreadPool
from edgepipe.media.chooser import DecoderChooser
from edgepipe.media.errors import SourceError
from edgepipe.media.frame import Frame, FramePool, FrameSize
from edgepipe.media.reservations import plan_frame_pool, pool_capacity
from edgepipe.media.sources import synthetic
from edgepipe.media.sources.handoff import Handoff
from edgepipe.media.sources.outlet import Outlet
from edgepipe.media.sources.reconnect import Reconnector
from edgepipe.media.status import SourceStatus
from edgepipe.media.url import SYNTHETIC_DEFAULT, SourceURL, parse
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.memory_plan import PlanNode
from edgepipe.sched import affinity
from edgepipe.wire.redact import redact_text, redact_url

log = logging.getLogger(__name__)

_OPENER = DaemonThreadPool(2, "source-open")
"""Where a file is checked at start outside a pipeline (in one, the node's hook threads): daemon
threads, so an open that hangs never keeps the process alive."""


class VideoSource:
    """Frames from ``url`` (see :mod:`edgepipe.media.url` for what URLs mean).

    Use as a pipeline source: ``p.source("camera", VideoSource(url))``. Its frames reach the
    nodes that read a live one through a ``latest`` lane of one frame unless they declare
    otherwise (the newest picture, never a queue of old ones: :mod:`edgepipe.graph.pipeline`);
    a file's through a ``block`` lane (every frame).
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
        self.pool: FramePool | None = None
        self._status = SourceStatus(url)  # written by the decode thread, read anywhere
        self._chooser: DecoderChooser | None = None
        self._handoff: Handoff | None = None
        self._outlet: Outlet | None = None
        self._thread: threading.Thread | None = None
        self._thread_done: asyncio.Future[None] | None = None
        self._stop = threading.Event()
        """The running decode thread's: each thread gets its own, so a thread abandoned in an
        open that FFmpeg cannot interrupt stops when it returns, even after a restart."""
        self._ended = False
        """The decode thread has ended (its error or end was taken by the loop)."""
        self._stop_budget_s = 5.0
        self._emit_event: Any = None
        self._tag: threadname.Tag | None = None

    def __repr__(self) -> str:
        return f"VideoSource({redact_url(self.url)!r})"  # error messages quote it

    @property
    def state(self) -> str:
        """connecting, live, stalled, reconnecting, ended (idle before start)."""
        return self._status.state_info[0]

    @property
    def state_reason(self) -> str:
        """Why the source is in its state ("read timed out", ...): empty when live."""
        return self._status.state_info[1]

    @property
    def state_info(self) -> tuple[str, str]:
        """(state, reason), read together."""
        return self._status.state_info

    @property
    def source_id(self) -> str:
        """The id its frames carry: the node's id once started in a pipeline, else the URL."""
        return self._status.source_id

    @property
    def status(self) -> SourceStatus:
        """Its state, counters and decoder in one object, the same across restarts: what the
        nodes downstream read as ``current_node().sources[node_id]``."""
        return self._status

    @property
    def decodes_video(self) -> bool:
        """Whether it runs a video decoder (the scheduler sizes decoder threads by their count)."""
        return self.src.kind != "synthetic"

    @property
    def decoder_used(self) -> str:
        """What decodes: ``h264+cuda``, ``h264 (software)``, ``synthetic`` (empty before start)."""
        return self._status.decoder_used

    # Counters, written by the decode thread, read anywhere (ints: no lock needed to read).

    @property
    def decoded(self) -> int:
        return self._status.decoded

    @property
    def delivered(self) -> int:
        return self._status.delivered

    @property
    def dropped(self) -> int:
        """Frames decoded while consumers held every frame of the pool (live sources)."""
        return self._status.dropped

    @property
    def corrupt(self) -> int:
        return self._status.corrupt

    @property
    def reconnects(self) -> int:
        return self._status.reconnects

    @property
    def decoder_failovers(self) -> int:
        """Decoders replaced mid-stream because they failed on it (hardware, then the next)."""
        return self._status.failovers

    # -- lifecycle (node hooks) ---------------------------------------------------------------

    async def start(self) -> None:
        """Size the pool from the consumers, then start the decode thread. A file is checked
        first, so a missing or broken file fails at start-up with its name."""
        holds: tuple[int, ...] = ()
        try:
            ctx = current_node()
        except RuntimeError:  # used outside a pipeline
            ctx = None
        if ctx is not None:
            self._status.source_id = ctx.node_id
            self._status.gauges = ctx.gauges
            self._emit_event = ctx.emit_event
            self._stop_budget_s = ctx.stop_timeout_s
            holds = ctx.consumer_holds
        self.pool = FramePool(pool_capacity(self.pool_size, holds), name=self.source_id)
        if self._chooser is None:  # kept across restarts: it remembers a decoder that failed
            self._chooser = DecoderChooser(
                self.src,
                self.decoder,
                timeout_s=self.timeout_s,
                rtsp_transport=self.rtsp_transport,
                options=self.options,
            )
        if self.src.kind == "file":
            if ctx is not None and ctx.run_blocking is not None:
                await ctx.run_blocking(self._chooser.prepare)
            else:
                await asyncio.wrap_future(_OPENER.submit(self._chooser.prepare))
        self._launch()

    def _launch(self) -> None:
        """Start a decode thread, with its own stop flag and handoff."""
        loop = asyncio.get_running_loop()
        assert self.pool is not None
        assert self._chooser is not None
        self._stop.set()  # a thread abandoned before (stuck in an open) stops when it returns
        stop = self._stop = threading.Event()
        handoff = self._handoff = Handoff(loop)
        outlet = self._outlet = Outlet(self.url, self._status, self.pool, handoff, stop)
        produce: Callable[[], None]
        if self.src.kind == "synthetic":
            produce = functools.partial(synthetic.play, self.src, outlet)
        else:
            reconnector = Reconnector(
                outlet,
                self._chooser,
                self.src,
                live=self.live,
                loop=self.loop,
                realtime=self.realtime,
                timeout_s=self.timeout_s,
                backoff_initial_s=self.backoff_initial_s,
                backoff_max_s=self.backoff_max_s,
            )
            produce = reconnector.run
        done: asyncio.Future[None] = loop.create_future()
        # Named for the CPU ledger: FFmpeg's threads, started from this one, are this source's.
        tag = self._tag = threadname.Tag(self.source_id, DECODE)

        def body() -> None:
            affinity.pin_light()  # off the cores where model runs go (governed runs)
            threadname.name_thread(tag)
            try:
                outlet.run(produce)
            finally:
                threadname.thread_ending()
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                    loop.call_soon_threadsafe(_set_done, done)

        self._thread_done = done
        self._ended = False
        # In the run's context: its decoders' threads and cores are the run's (edgepipe.core.scope).
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(body,),
                                        name=f"edgepipe-decode-{self.source_id}", daemon=True)  # fmt: skip
        self._thread.start()

    def plan_memory(self, plan: MemoryPlan, node: PlanNode) -> FrameSize | None:
        """Reserve in ``plan`` the frame pool :meth:`start` would size, at the size the input
        declares (opened briefly, within ``timeout_s``); the frame size, or None when unknown."""
        return plan_frame_pool(plan, node, self.src, pool_size=self.pool_size, timeout_s=self.timeout_s,
                               rtsp_transport=self.rtsp_transport, options=self.options)  # fmt: skip

    async def stop(self) -> None:
        """Stop the decode thread and free its frames, within the runtime's stop budget. A
        thread in an open (which FFmpeg cannot interrupt before its ``timeout_s``) is not waited
        for: it is a daemon, and it stops by itself when the open returns."""
        self._stop.set()
        done, outlet = self._thread_done, self._outlet
        if done is not None and not done.done():
            if outlet is not None and outlet.opening:
                log.info("%s: stopped while opening; the open ends by itself within %g s",
                         redact_url(self.url), self.timeout_s)  # fmt: skip
            else:
                wait_s = max(0.1, min(self.timeout_s + 0.5, self._stop_budget_s - 1.0))
                try:
                    await asyncio.wait_for(asyncio.shield(done), wait_s)
                except TimeoutError:
                    log.warning("%s: decode thread did not stop within %.1f s; abandoned",
                                redact_url(self.url), wait_s)  # fmt: skip
        if self._handoff is not None:
            self._status.unsent += self._handoff.drain()
            self._status.update_gauges()
        if self._chooser is not None and (done is None or done.done()):
            self._chooser.discard()  # started but never ran: the input opened at start-up

    async def __aiter__(self) -> AsyncIterator[Frame]:
        if self._handoff is None:
            raise RuntimeError("VideoSource.start() was not called (run it as a pipeline source)")
        if self._ended:
            # Iterated again after its decode thread ended with an error, without stop() and
            # start() in between (``on_error="skip"``): open the input again.
            log.info("[%s] %s: reopening", self.source_id, redact_url(self.url))
            self._launch()
        handoff = self._handoff
        while True:
            kind, payload = await handoff.get()
            if kind == "frame":
                yield payload
            elif kind == "state":
                await self._report_state(*payload)
            elif kind == "error":
                self._ended = True
                raise payload
            elif kind == "end":
                self._ended = True
                return

    async def _report_state(self, state: str, reason: str) -> None:
        reason = redact_text(reason)  # FFmpeg's messages may quote the URL
        self._status.gauges["source"] = state
        level = logging.INFO if state in ("connecting", "live", "ended") else logging.WARNING
        log.log(level, "[%s] %s: %s%s", self.source_id, redact_url(self.url), state,
                f" ({reason})" if reason else "")  # fmt: skip
        if self._emit_event is not None:
            await self._emit_event("source_state", {"source": self.source_id, "url": redact_url(self.url),
                                                    "state": state, "reason": reason})  # fmt: skip


def _set_done(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
