"""The event recorder's blocking half: encode, keep the ring, cut clips (one worker thread).

:class:`RecorderEngine` is called, one call at a time, from the recorder's worker thread:
:meth:`~RecorderEngine.frame` for each output frame, :meth:`~RecorderEngine.trigger` for each
hit, :meth:`~RecorderEngine.tick` a few times a second and :meth:`~RecorderEngine.close` at the
end. Each returns the ``event`` messages it made (a clip started, a clip saved). Stream time is
the encoder's 90 kHz timeline (:mod:`~edgepipe.sinks.events_encode`); wall time is when each
frame was decoded.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av.error

from edgepipe.core.results import Message
from edgepipe.media.frame import Frame
from edgepipe.sched.gate import AdmissionTimeout, Ticket, gate
from edgepipe.sinks.events_clip import ClipWriter, clip_name
from edgepipe.sinks.events_encode import TICKS_PER_S, TIME_BASE, ClipEncoder
from edgepipe.sinks.events_retention import prune
from edgepipe.sinks.events_ring import PacketRing
from edgepipe.sinks.events_trigger import Hit

log = logging.getLogger(__name__)

ENCODE_WAIT_S = 2.0
"""The longest an encode waits for the CPU budget; past it the frame is skipped (counted)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The recorder's settings, checked by :class:`~edgepipe.sinks.events.EventRecorder`."""

    pre_s: float
    post_s: float
    max_clip_s: float
    lost_after_s: float
    max_bytes: int | None
    max_age_s: float | None
    ring_bytes: int
    ring_packets: int


class _Clip:
    """The clip being written and what its event says."""

    __slots__ = (
        "end_t",
        "first",
        "first_trigger_pts",
        "last_trigger_pts",
        "source",
        "start_t",
        "triggers",
        "writer",
    )

    def __init__(self, writer: ClipWriter, first: Hit, source: str, start_t: float, trigger_pts: int) -> None:
        self.writer = writer
        self.first = first
        self.source = source
        self.start_t = start_t
        self.end_t = start_t
        self.first_trigger_pts = self.last_trigger_pts = trigger_pts
        self.triggers = 1


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
        self._clip: _Clip | None = None
        self._pending: Hit | None = None  # a trigger before the first frame
        self._last_pts: int | None = None
        self._last_frame_mono = time.monotonic()
        self._source = ""
        self._open_failures = 0
        """Clips that could not be opened in a row (a full disk, a folder made read-only): the
        first is logged as an error, the rest at debug level until one opens again."""

    @property
    def recording(self) -> bool:
        return self._clip is not None

    @property
    def part(self) -> Path | None:
        """The hidden file of the clip being written, if any."""
        clip = self._clip
        return clip.writer.part if clip is not None else None

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
            age = pts - clip.writer.base_pts
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
        name = clip_name(self.folder, self._source, first_wall)
        try:
            writer = ClipWriter(self.folder, name, *size, first_pts)
        except (av.error.FFmpegError, OSError) as exc:
            # Every trigger tries again: one line per outage, not one per detection.
            self._open_failures += 1
            level = logging.ERROR if self._open_failures == 1 else logging.DEBUG
            more = "; further failures are not logged until a clip opens" if level == logging.ERROR else ""
            log.log(level, "event recordings: cannot open a clip in %s: %s%s", self.folder, exc, more)
            return []
        if self._open_failures:
            log.info("event recordings: clips open again in %s (%d trigger(s) recorded nothing)", self.folder,
                     self._open_failures)  # fmt: skip
            self._open_failures = 0
        clip = self._clip = _Clip(writer, hit, self._source, first_wall, trigger_pts)
        for packet, pts, _key, wall in preroll:
            if not self._write(clip, packet, pts, wall):
                return [self._message("end", clip, "write_failed", None)]
        log.info(
            "event recordings: %s (%s %s): recording %s", self._source, hit.kind, hit.reason, writer.path
        )
        return [self._message("start", clip, None, None)]

    def _write(self, clip: _Clip, packet: Any, pts: int, wall: float) -> bool:
        try:
            clip.writer.write(packet, pts)
            clip.end_t = wall
            return True
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            log.error("event recordings: cannot write %s: %s; clip removed", clip.writer.path, exc)
            clip.writer.abandon()
            self._clip = None
            return False

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
        clip, self._clip = self._clip, None
        if clip is None:
            return []
        writer = clip.writer
        path = writer.finish()
        if path is None:
            return [self._message("end", clip, why, None)]
        self.clips += 1
        log.info(
            "event recordings: saved %s (%.1f s, %d frames, %s)", path, writer.duration_s, writer.frames, why
        )
        try:
            prune(self.folder, self.limits.max_bytes, self.limits.max_age_s, keep=path.name)
        except OSError as exc:
            log.warning("event recordings: cannot apply retention in %s: %s", self.folder, exc)
        return [self._message("end", clip, why, path)]

    def _message(self, state: str, clip: _Clip, why: str | None, path: Path | None) -> Message:
        writer = clip.writer
        ended = state == "end"
        data = {
            "what": "recording",
            "state": state if not ended or path is not None else "removed",
            "path": str(path if path is not None else writer.path),
            "source": clip.source,
            "start_t": clip.start_t,
            "start_pts": writer.base_pts,
            "end_t": clip.end_t if ended else None,
            "end_pts": writer.last_pts if ended else None,
            "trigger_pts": clip.first_trigger_pts,
            "last_trigger_pts": clip.last_trigger_pts,
            "time_base": str(TIME_BASE),
            "duration_s": round(writer.duration_s, 3) if ended else None,
            "frames": writer.frames,
            "bytes": writer.bytes,
            "trigger": clip.first.to_dict(),
            "triggers": clip.triggers,
            "ended_by": why,
        }
        return Message("event", data)
