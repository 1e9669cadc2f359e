"""Event recordings: an MP4 clip around each event, with the seconds before it.

::

    pixelated = p.stage("pixelate", Redact(), inputs=faces)
    events = p.stage("events", EventRecorder("events", trigger=Trigger(labels={"face"}), pre_s=5, post_s=5),
                     inputs={"frames": (pixelated, "latest", 2), "faces": faces})
    p.sink("event_log", log_events, inputs=events)

:class:`EventRecorder` is a stage fed the pipeline's *output* frames (those a viewer or a
recording gets: for face privacy, the pixelated ones, never the camera's own packets) on one lane
and its triggers on others (:class:`~edgepipe.sinks.events.trigger.Trigger`: detections of given
labels over a score, an ``event`` message such as a language model's description, a source
entering a state such as ``stalled``). It encodes every frame once into H.264 and keeps the
latest packets in a bounded ring (:mod:`~edgepipe.sinks.events.ring`) covering at least
``pre_s`` seconds back to a keyframe. A trigger starts a clip: the ring's packets from the
latest keyframe at or before ``pre_s`` seconds ago are written to an MP4 as they are (remuxed,
not encoded again), then the live packets, until ``post_s`` seconds after the last trigger (a
trigger during a clip extends it), ``max_clip_s`` at most. A clip is written under a hidden
temporary name and renamed when complete; when the input ends, the run stops, or frames stop
coming for ``lost_after_s`` (the source is lost), the clip is finished, or removed if it holds
no frame. After each clip the oldest clips are deleted until the folder's clips take at most
``max_bytes`` and none is older than ``max_age_s``.

It emits a ``Message("event", {"what": "recording", ...})`` when a clip starts (``state``:
``start``) and one when it ends: ``end`` when it is saved, ``removed`` when nothing could be
kept (with the ``error`` when its file could not be opened, written or finished: a full disk, a
folder removed). Every ``start`` sent gets exactly one of them, whatever happens: when the stop's
time (the node's hook timeout) runs out before the clip is finished, the stop itself sends
``removed`` (``error``: :data:`CUT_SHORT`; the clip's hidden file is deleted), or ``end`` when
the file was named just in time, and what the worker says of that clip later is not sent. The
one exception: messages the stop could not hand on within :data:`SEND_GRACE_S` more (a results
disk that hangs) are not sent, and a warning says how many. A clip lost to an error or to the
stop's deadline fails the run's output (:attr:`EventRecorder.failed_output`: exit 1, a line
naming the clip and the cause), as a recording that could not be written does. Its ``path``,
``source``, ``start_t``/``end_t`` (wall-clock seconds of its first and last frame),
``start_pts``/``end_pts`` (the recorder's 90 kHz timeline, ``time_base``), ``duration_s``,
``frames``, ``bytes``, the first ``trigger`` (kind, reason, source), the number of
``triggers`` and what ended it (``ended_by``: ``post_roll``, ``max_length``, ``source_lost``,
``size_changed``, ``ended``, ``stopped``) and ``error`` (``None``, or why the file was lost). A
clip finished by ``stop()`` (a forced stop) is told through the run's events instead (results,
viewers, MQTT's listener: the stage's outputs are closed by then).

Encoding and file writes run on the recorder's own worker thread, never on the event loop; a
timer checks for a lost source and polls the states of the sources upstream
(``current_node().sources``: a :class:`~edgepipe.media.VideoSource`'s) four times a second.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from edgepipe.core.checks import check_writable_folder
from edgepipe.core.context import SourceState, current_node
from edgepipe.core.errors import OutputError, os_reason
from edgepipe.core.executor import DaemonThreadPool
from edgepipe.core.units import check_seconds
from edgepipe.media.frame import Frame
from edgepipe.sched.gate import Ticket
from edgepipe.sched.ledger import ticket_tag
from edgepipe.sinks.events.encode import ClipEncoder
from edgepipe.sinks.events.engine import Limits, RecorderEngine
from edgepipe.sinks.events.retention import prune, remove_parts
from edgepipe.sinks.events.trigger import Trigger
from edgepipe.wire.results import Message

log = logging.getLogger(__name__)

TICK_S = 0.25
MAX_FPS = 60
"""The frame rate the ring's packet count is sized for."""
CUT_SHORT = "the stop's deadline passed before the clip was finished"
"""The ``error`` of a clip the stop had no time to finish."""
SEND_GRACE_S = 0.5
"""How long a stop whose deadline passed may still take to hand on the messages it has."""


class EventRecorder:
    """A stream stage that records a clip around each trigger into ``events_dir``. See the
    module's documentation. Raises ``ValueError`` for a setting that cannot be right."""

    priority = "high"
    """Recording is the last thing the governor slows."""

    def __init__(
        self,
        events_dir: str | Path,
        *,
        trigger: Trigger | None = None,
        pre_s: float = 5.0,
        post_s: float = 5.0,
        max_clip_s: float = 120.0,
        max_bytes: int | None = 2_000_000_000,
        max_age_s: float | None = 7 * 86400.0,
        encoder: str = "auto",
        crf: int = 23,
        keyframe_interval_s: float = 1.0,
        ring_bytes: int = 32_000_000,
        lost_after_s: float = 3.0,
    ) -> None:
        if not str(events_dir).strip():
            raise ValueError("EventRecorder needs a folder for its clips (got an empty path)")
        try:
            # Said at declaration (exit 2, before a camera opens or a model loads), not at start.
            check_writable_folder(events_dir)
        except ValueError as exc:
            raise ValueError(f"EventRecorder events_dir: expected {exc}") from None
        check_seconds("EventRecorder pre_s", pre_s, at_least=0)
        check_seconds("EventRecorder post_s", post_s, at_least=0)
        check_seconds("EventRecorder max_clip_s", max_clip_s, above=0)
        check_seconds("EventRecorder keyframe_interval_s", keyframe_interval_s, above=0)
        check_seconds("EventRecorder lost_after_s", lost_after_s, above=0)
        if max_age_s is not None:
            check_seconds("EventRecorder max_age_s", max_age_s, above=0)
        if max_clip_s <= pre_s:
            raise ValueError(f"EventRecorder max_clip_s ({max_clip_s}) must be longer than pre_s ({pre_s})")
        for name, value in (("max_bytes", max_bytes), ("ring_bytes", ring_bytes)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"EventRecorder {name} must be a positive number of bytes, got {value!r}")
        if not (isinstance(crf, int) and 0 <= crf <= 51):
            raise ValueError(
                f"EventRecorder crf must be an integer in [0, 51] (23: the default), got {crf!r}"
            )
        self.events_dir = Path(events_dir)
        self.trigger = trigger if trigger is not None else Trigger()
        self.sources: Mapping[str, SourceState] = {}
        """The states of the sources upstream, by node id (the node's context's, from
        :meth:`start` on): a state such as ``stalled`` may trigger a clip."""
        packets = math.ceil((pre_s + keyframe_interval_s + 1.0) * MAX_FPS)
        age = None if max_age_s is None else float(max_age_s)
        self.limits = Limits(
            float(pre_s),
            float(post_s),
            float(max_clip_s),
            float(lost_after_s),
            max_bytes,
            age,
            ring_bytes,
            packets,
        )
        clip_encoder = ClipEncoder(encoder=encoder, keyframe_interval_s=keyframe_interval_s, crf=crf)
        ticket = Ticket(self.events_dir.name or "events", "encode", 2, short=True)
        self.engine = RecorderEngine(self.events_dir, self.limits, clip_encoder, ticket)
        self._pool: DaemonThreadPool | None = None
        self._states: dict[str, str] = {}
        self._outbox: collections.deque[Message] = collections.deque()
        """Messages made and not yet sent (appended on the worker, taken on the loop)."""
        self._lock = threading.Lock()
        self._open: Message | None = None
        """The ``start`` in the outbox, or sent, whose clip's closing is not (yet)."""
        self._cut = False
        """The stop's deadline passed: what the worker makes from now on is not sent."""

    @property
    def failed_output(self) -> str | None:
        """The clips lost to an error (a full disk, a folder removed) or to the stop's deadline,
        naming the first and its cause; ``None`` when none was (the run's report names it: exit 1)."""
        lost, first = self.engine.lost, self.engine.first_lost
        if first is None:
            return None
        more = f"; {lost - 1} more lost (see the log)" if lost > 1 else ""
        return f"event clip {first[0]} lost: {first[1]}{more}"

    # -- hooks ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check the folder (its parent must exist; the folder itself is created: it is the
        recorder's, and old clips in it are deleted by retention) and delete what a killed run
        left half-written. Raises :class:`~edgepipe.core.errors.OutputError`."""
        try:
            ctx = current_node()
            self.engine.ticket.set_owner(ctx.node_id, "encode", ctx.priority)
            self.sources = ctx.sources
        except RuntimeError:
            pass
        # Named for the CPU ledger: its work (mostly encoding, the encoder's threads started
        # from it) is this node's encode.
        self._threads_tag = ticket_tag(self.engine.ticket)
        self._pool = DaemonThreadPool(1, "events", spare_workers=0, tag=self._threads_tag)
        with self._lock:  # a restart (the node's error policy) after a stop cut short records again
            self._cut, self._open = False, None
        self.engine.resume()
        await self._run(self._prepare_folder)

    def _prepare_folder(self) -> None:
        folder = self.events_dir
        try:
            # Checked at declaration too; said again here for a folder changed since (a run that
            # cannot keep clips stops now, not at the first event).
            check_writable_folder(folder)
        except ValueError as exc:
            raise OutputError(f"event clips: expected {exc}", path=str(folder)) from None
        if not folder.is_dir():
            try:
                folder.mkdir()
            except OSError as exc:
                raise OutputError(
                    f"cannot create the events folder: {os_reason(exc)}", path=str(folder)
                ) from exc
            log.info("event recordings: created the folder %s", folder)
        try:
            remove_parts(folder)
            prune(folder, self.limits.max_bytes, self.limits.max_age_s)
        except OSError as exc:
            raise OutputError(f"cannot use the events folder: {exc}", path=str(folder)) from exc

    async def stop(self) -> None:
        """Finish a clip still being written (a forced stop), send what the stream could not (a
        clip's messages made while it was cancelled) as the node's events, and let the worker
        go. When the stop is cut short (the node's hook timeout) before the clip is finished,
        the clip is closed from here (:meth:`~edgepipe.sinks.events.engine.RecorderEngine.cut_short`:
        its hidden file removed, as a process about to exit leaves nothing half-written behind;
        ``removed`` with :data:`CUT_SHORT`, a lost clip: :attr:`failed_output`), and what the
        worker makes later is not sent. Either way the messages made are sent, the last ones for
        up to :data:`SEND_GRACE_S` past the deadline."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        finished = False
        try:
            # Always through the worker, after what it is still doing: a trigger whose await was
            # cancelled with the stream may open a clip after this line (recording is False now).
            await asyncio.get_running_loop().run_in_executor(pool, self._call, self.engine.close, "stopped")
            finished = True
            await self._send()
        finally:
            pool.shutdown(wait=False)
            if not finished:
                with self._lock:
                    self._cut = True
                    sent, self._open = self._open, None
                self._outbox.extend(self.engine.cut_short(sent, CUT_SHORT))
            if self._outbox:  # the deadline passed: what is made still goes, for a moment more
                await self._send(SEND_GRACE_S)

    async def _send(self, limit_s: float | None = None) -> None:
        """Send the outbox as the node's events (outside a pipeline, a unit test, it stays)."""
        try:
            ctx = current_node()
        except RuntimeError:
            return
        try:
            async with asyncio.timeout(limit_s):
                while self._outbox:
                    message = self._outbox.popleft()  # first: sent at most once, even if cut here
                    await ctx.emit_event(message.kind, message.data)
        finally:
            if self._outbox and limit_s is not None:
                log.warning("event recordings: %d event message(s) not sent: the stop's time ran out",
                            len(self._outbox))  # fmt: skip

    # -- the stream -------------------------------------------------------------------------------

    def _call(self, fn: Callable[..., list[Message]], *args: Any) -> None:
        # On the worker: the messages wait in the outbox until sent, so that a call whose await
        # was cancelled (the stream closing) loses none of them: stop() sends what is left.
        messages = fn(*args)
        with self._lock:
            if self._cut:  # the stop is over: it closed the open clip itself (cut_short)
                if messages:
                    log.debug("event recordings: %d message(s) made after the stop's deadline, not sent",
                              len(messages))  # fmt: skip
                return
            for message in messages:
                self._open = message if message.data.get("state") == "start" else None
            self._outbox.extend(messages)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self._pool is not None, "EventRecorder is not started"
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _feed(self, item: Any) -> None:
        if isinstance(item, Frame):
            await self._run(self._call, self.engine.frame, item)
        elif (hit := self.trigger.match(item)) is not None:
            await self._run(self._call, self.engine.trigger, hit)

    def _sent(self) -> list[Message]:
        """The messages made so far, taken from the outbox."""
        out = list(self._outbox)
        self._outbox.clear()
        return out

    async def _take(self, item: Any) -> list[Message]:
        """Feed one item; the messages it made (for tests that drive the recorder directly)."""
        await self._feed(item)
        return self._sent()

    async def _tick(self) -> None:
        for source_id, source in self.sources.items():
            info = source.state_info
            state, reason = (str(info[0]), str(info[1])) if info is not None else ("", "")
            if state and self._states.get(source_id) != state:
                self._states[source_id] = state
                hit = self.trigger.state(source_id, state, reason)
                if hit is not None:
                    await self._run(self._call, self.engine.trigger, hit)
        if self.engine.recording:
            await self._run(self._call, self.engine.tick)

    async def process(self, items: AsyncIterator[Any]) -> AsyncIterator[Message]:
        """Frames and triggers in, ``event`` messages out (see the module's documentation)."""
        # A wake-up per call that made messages (bounded: the readers wait for the stream); the
        # messages stay in the outbox until yielded.
        wake: asyncio.Queue[bool] = asyncio.Queue(8)
        done = asyncio.Event()
        failure: list[Exception] = []

        async def read() -> None:
            # Never raises: a failing child would cancel the generator wherever it is suspended.
            cancelled = False
            try:
                async for item in items:
                    await self._feed(item)
                    if self._outbox:
                        await wake.put(True)
                await self._run(self._call, self.engine.close, "ended")
            except asyncio.CancelledError:  # the generator is closing: nobody reads the queue
                cancelled = True
                raise
            except Exception as exc:
                failure.append(exc)
            finally:
                close = getattr(items, "aclose", None)
                if close is not None:  # its held input is released now, not when collected
                    with contextlib.suppress(Exception):
                        await close()
                done.set()
                if not cancelled:
                    await wake.put(False)

        async def tick() -> None:
            cancelled = False
            try:
                while not done.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(TICK_S):
                            await done.wait()
                    if not done.is_set():
                        await self._tick()
                        if self._outbox:
                            await wake.put(True)
            except asyncio.CancelledError:
                cancelled = True
                raise
            except Exception as exc:
                failure.append(exc)
                done.set()
            finally:
                if not cancelled:
                    await wake.put(False)

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(read())
                group.create_task(tick())
                ended = 0
                while ended < 2:
                    if not await wake.get():
                        ended += 1
                    while self._outbox:
                        yield self._outbox.popleft()
        except BaseExceptionGroup as group:  # GeneratorExit or KeyboardInterrupt at a yield
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        if failure:
            raise failure[0]
