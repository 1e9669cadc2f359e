"""The event recorder's blocking half: encode, keep the ring, cut clips (one worker thread).

:class:`RecorderEngine` is called, one call at a time, from the recorder's worker thread:
:meth:`~RecorderEngine.frame` for each output frame, :meth:`~RecorderEngine.trigger` for each
hit, :meth:`~RecorderEngine.tick` a few times a second and :meth:`~RecorderEngine.close` at the
end. Each returns the ``event`` messages it made (a clip started, a clip saved or removed).
Stream time is the encoder's 90 kHz timeline (:mod:`~edgepipe.sinks.events.encode`); wall time
is when each frame was decoded.

A clip is the event's span of frames, whether or not its file can be written: a file that cannot
be opened, written or finished (a full disk, a folder removed) is removed at once, and the clip
goes on without it (later triggers extend it, no new clip opens) until it ends as any clip does;
then its one closing message says ``removed``, with the ``error``. Every ``start`` gets exactly
one ``end`` or ``removed``, and a disk that stays full costs one failed file per event, not one
per trigger. Clips lost that way are counted (:attr:`RecorderEngine.lost`).

A stop whose time runs out while the worker is still busy (:meth:`RecorderEngine.cut_short`,
from the event loop) closes the clips not closed yet itself; what the worker would say of them
afterwards is not said, so that a clip still has one closing message, and no clip opens after.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av.error

from edgepipe.core.errors import os_reason
from edgepipe.media.frame import Frame
from edgepipe.sched.gate import AdmissionTimeout, Ticket, gate
from edgepipe.sinks.events.clip import ClipWriter, clip_name
from edgepipe.sinks.events.encode import TICKS_PER_S, ClipEncoder
from edgepipe.sinks.events.message import ClipRecord
from edgepipe.sinks.events.retention import prune
from edgepipe.sinks.events.ring import PacketRing
from edgepipe.sinks.events.trigger import Hit
from edgepipe.wire.results import Message

log = logging.getLogger(__name__)

ENCODE_WAIT_S = 2.0
"""The longest an encode waits for the CPU budget; past it the frame is skipped (counted)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The recorder's settings, checked by :class:`~edgepipe.sinks.events.recorder.EventRecorder`."""

    pre_s: float
    post_s: float
    max_clip_s: float
    lost_after_s: float
    max_bytes: int | None
    max_age_s: float | None
    ring_bytes: int
    ring_packets: int


class RecorderEngine:
    """Encodes frames once into a :class:`PacketRing` and cuts clips from it into ``folder``."""

    def __init__(self, folder: Path, limits: Limits, encoder: ClipEncoder, ticket: Ticket) -> None:
        self.folder = folder
        self.limits = limits
        self.encoder = encoder
        self.ticket = ticket
        keep = round((limits.pre_s + encoder.keyframe_ticks / TICKS_PER_S) * TICKS_PER_S)
        self.ring = PacketRing(limits.ring_packets, limits.ring_bytes, keep)
        self.clips = 0
        """Clips saved."""
        self.frames = 0
        """Frames encoded."""
        self.skipped = 0
        """Frames not encoded: the CPU budget did not admit them in time, or the encoder failed."""
        self._lock = threading.Lock()  # one call at a time, whichever thread makes it
        self._clip: ClipRecord | None = None
        self._pending: Hit | None = None  # a trigger before the first frame
        self._last_pts: int | None = None
        self._last_frame_mono = time.monotonic()
        self._source = ""
        self.lost = 0
        """Clips whose file could not be kept (opened, written or finished)."""
        self.first_lost: tuple[Path, str] | None = None
        """The first of them, and why."""
        self._failures = 0
        """Clip files that failed since one was last saved (a full disk, a folder made
        read-only): the first is logged as an error, the rest at debug level until one is saved."""
        self._told = threading.Lock()
        """Held while a clip's closing is made: the worker's and the stop's never both are."""
        self._finishing: ClipRecord | None = None  # the clip _finish() is closing
        self._closed_lately: collections.deque[ClipRecord] = collections.deque(maxlen=4)
        """The last clips closed (one call closes one or two): the stop finds a closing made
        by a call it did not see return."""
        self._cut = False  # cut_short() ran: no clip opens any more

    @property
    def recording(self) -> bool:
        return self._clip is not None

    @property
    def clip_path(self) -> Path | None:
        """Where the clip being written lands once saved, if any."""
        clip = self._clip
        return clip.path if clip is not None else None

    @property
    def part(self) -> Path | None:
        """The hidden file of the clip being written, if any."""
        clip = self._clip
        return clip.writer.part if clip is not None and clip.writer is not None else None

    def frame(self, frame: Frame) -> list[Message]:
        with self._lock:
            out: list[Message] = []
            size = self.encoder.size
            try:
                with gate().admit(self.ticket, timeout_s=ENCODE_WAIT_S):
                    packets = self.encoder.encode(frame)
            except AdmissionTimeout:
                self.skipped += 1
                return out
            except (av.error.FFmpegError, OSError, ValueError) as exc:
                self.skipped += 1
                log.warning("event recordings: cannot encode %s: %s", frame, exc)
                return out
            if size is not None and self.encoder.size != size:  # a new stream: old packets do not join it
                out += self._finish("size_changed")
                self.ring.clear()
            self.frames += 1
            self._source = frame.source_id
            self._last_frame_mono = now = time.monotonic()
            wall = time.time() - max(0.0, now - frame.t_decoded_ns / 1e9)
            for packet in packets:
                out += self._packet(packet, int(packet.pts), bool(packet.is_keyframe), wall)
            if self._pending is not None and self._last_pts is not None:
                hit, self._pending = self._pending, None
                out += self._trigger(hit)
            return out

    def _packet(self, packet: Any, pts: int, key: bool, wall: float) -> list[Message]:
        out: list[Message] = []
        clip = self._clip
        if clip is not None:
            age = pts - clip.base_pts
            max_ticks = round(self.limits.max_clip_s * TICKS_PER_S)
            if pts > clip.last_trigger_pts + round(self.limits.post_s * TICKS_PER_S):
                out += self._finish("post_roll")
            elif age >= max_ticks or (key and age >= max_ticks - self.encoder.keyframe_ticks):
                # Cut on a keyframe where one comes in time: the next clip carries on from it,
                # with no gap and no overlap, while the triggers keep coming.
                out += self._finish("max_length")
                if key:
                    out += self._open(clip.first, [], clip.last_trigger_pts, pts, wall)
                else:
                    self._pending = clip.first
                    self.encoder.request_keyframe()
        self.ring.push(packet, pts, key, wall)
        self._last_pts = pts
        clip = self._clip
        if clip is not None:
            self._write(clip, packet, pts, wall)
        return out

    def trigger(self, hit: Hit) -> list[Message]:
        with self._lock:
            if self._last_pts is None:  # nothing encoded yet: the clip starts with the first frame
                self._pending = self._pending or hit
                return []
            return self._trigger(hit)

    def _trigger(self, hit: Hit) -> list[Message]:
        now = self._last_pts
        assert now is not None
        clip = self._clip
        if clip is not None:
            clip.last_trigger_pts = now
            clip.triggers += 1
            return []
        preroll = list(self.ring.since(now - round(self.limits.pre_s * TICKS_PER_S)))
        if not preroll:  # no keyframe held (a ring too small): the clip starts at the next one
            self._pending = hit
            self.encoder.request_keyframe()
            return []
        return self._open(hit, preroll, now, preroll[0][1], preroll[0][3])

    def _open(
        self,
        hit: Hit,
        preroll: list[tuple[Any, int, bool, float]],
        trigger_pts: int,
        first_pts: int,
        first_wall: float,
    ) -> list[Message]:
        """A new clip starting at ``first_pts`` (a keyframe), with the ``preroll`` packets."""
        size = self.encoder.size
        assert size is not None
        if self._cut:
            return []
        clip = self._clip = ClipRecord(self.folder, hit, self._source, first_wall, trigger_pts, first_pts)
        try:
            name = clip_name(self.folder, self._source, first_wall)
            clip.path = self.folder / name
            clip.writer = ClipWriter(self.folder, name, *size, first_pts)
            clip.part = clip.writer.part
        except (av.error.FFmpegError, OSError) as exc:
            self._fail(clip, f"cannot open the file: {os_reason(exc)}")
        if self._cut and clip.writer is not None:
            # cut_short() ran meanwhile and may not have seen this file: it goes now.
            clip.writer.abandon()
            clip.writer = None
        for packet, pts, _key, wall in preroll:
            self._write(clip, packet, pts, wall)
        if clip.writer is not None:
            log.info(
                "event recordings: %s (%s %s): recording %s", self._source, hit.kind, hit.reason, clip.path
            )
        clip.start = clip.message("start", None)
        return [clip.start]

    def _write(self, clip: ClipRecord, packet: Any, pts: int, wall: float) -> None:
        if clip.writer is not None:
            try:
                clip.writer.write(packet, pts)
            except (av.error.FFmpegError, OSError, ValueError) as exc:
                self._fail(clip, f"cannot write: {os_reason(exc)}")
        clip.frames += 1
        clip.bytes += packet.size
        clip.last_pts = pts
        clip.end_t = wall

    def _fail(self, clip: ClipRecord, why: str) -> None:
        """The clip's file failed: removed now; the clip goes on without it and ends ``removed``."""
        if clip.writer is not None:
            clip.writer.abandon()
            clip.writer = None
        clip.error = clip.error or why
        self._failures += 1
        # One line per outage, not one per event while the disk stays full.
        level = logging.ERROR if self._failures == 1 else logging.DEBUG
        more = "; further failures are not logged until a clip is saved" if self._failures == 1 else ""
        log.log(level, "event recordings: %s: %s; the clip is lost (removed)%s", clip.path, why, more)

    def tick(self) -> list[Message]:
        """A clip whose frames stopped coming (the source is lost) is finished."""
        with self._lock:
            if self._clip is not None and time.monotonic() - self._last_frame_mono > self.limits.lost_after_s:
                return self._finish("source_lost")
            return []

    def close(self, why: str = "stopped") -> list[Message]:
        """Finish the clip being written (the input ended, or the run stops)."""
        with self._lock:
            out = self._finish(why)
            self.ring.clear()
            return out

    def _finish(self, why: str) -> list[Message]:
        clip = self._clip
        if clip is None:
            return []
        # Always in _clip, _finishing or _closed_lately until its closing is made: cut_short()
        # finds it wherever the worker is.
        self._finishing, self._clip = clip, None
        try:
            return self._finish_clip(clip, why)
        finally:
            self._finishing = None

    def _finish_clip(self, clip: ClipRecord, why: str) -> list[Message]:
        writer, clip.writer = clip.writer, None
        path = writer.finish() if writer is not None else None
        if path is None:
            # Told by the stop already: its rename failed because the stop removed the file.
            if writer is not None and writer.error is not None and clip.closing is None:
                self._fail(clip, writer.error)
            return self._closed("removed", clip, why)
        assert writer is not None
        clip.path = path
        self.clips += 1
        if self._failures:
            log.info("event recordings: clips are saved again in %s (%d clip file(s) failed)", self.folder,
                     self._failures)  # fmt: skip
            self._failures = 0
        log.info(
            "event recordings: saved %s (%.1f s, %d frames, %s)", path, writer.duration_s, writer.frames, why
        )
        try:
            prune(self.folder, self.limits.max_bytes, self.limits.max_age_s, keep=path.name)
        except OSError as exc:
            log.warning("event recordings: cannot apply retention in %s: %s", self.folder, exc)
        return self._closed("end", clip, why)

    def _closed(self, state: str, clip: ClipRecord, why: str) -> list[Message]:
        """The clip's closing message (counted lost when ``removed`` with an error), or none
        when the stop made it already (:meth:`cut_short`)."""
        with self._told:
            if clip.closing is not None:
                log.debug("event recordings: %s: closed by the stop already; its %s is not said", clip.path,
                          state)  # fmt: skip
                return []
            if state == "removed" and clip.error is not None:
                self.lost += 1
                self.first_lost = self.first_lost or (clip.path, clip.error)
            clip.closing = clip.message(state, why)
            self._closed_lately.append(clip)
            return [clip.closing]

    def cut_short(self, sent: Message | None, error: str) -> list[Message]:
        """Close now, from any thread, every clip not closed yet: the stop's time ran out while
        the worker may still be in any call (writing, finishing, naming a clip). ``sent``: the
        ``start`` message of the clip open as far as the stop's listeners know.

        Each clip's hidden file is removed first (the worker writes on into an unlinked file,
        and its rename then fails); a clip whose file was named in time is saved (``end``),
        any other is lost (``removed`` with its own error or ``error``, counted in :attr:`lost`).
        Returns the closing of ``sent``'s clip (made now, or made by the worker and not yet
        passed on); the worker's later closings of these clips are not made again
        (:meth:`_closed`), and no clip opens after this."""
        self._cut = True
        out: list[Message] = []
        with self._told:
            clips = (*self._closed_lately, self._finishing, self._clip)
            for clip in dict.fromkeys(c for c in clips if c is not None):
                said = sent is not None and clip.start is sent
                if clip.closing is None:
                    self._close_now(clip, error)
                if said and clip.closing is not None:
                    out.append(clip.closing)
        return out

    def resume(self) -> None:
        """Open clips again after :meth:`cut_short` (the recorder started again)."""
        self._cut = False

    def _close_now(self, clip: ClipRecord, error: str) -> None:
        if clip.part is not None:
            with contextlib.suppress(OSError):
                clip.part.unlink()
        if clip.path != self.folder and clip.path.is_file():  # named just before: saved
            log.info("event recordings: saved %s just before the stop's deadline", clip.path)
            clip.closing = clip.message("end", "stopped")
            return
        clip.error = clip.error or error
        self.lost += 1
        self.first_lost = self.first_lost or (clip.path, clip.error)
        log.error("event recordings: %s: %s; removed", clip.path, clip.error)
        clip.closing = clip.message("removed", "stopped")
