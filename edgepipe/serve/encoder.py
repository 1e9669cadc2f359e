"""One encoder per source, its packets fanned out to every viewer (encode once, send to many).

aiortc 1.16 sends an ``av.Packet`` that a track's ``recv()`` returns without encoding it again
(``RTCRtpSender._next_encoded_frame`` only packetizes it), so a :class:`SharedEncoder` encodes
each frame once and each viewer's :class:`~edgepipe.serve.tracks.PacketTrack` reads the same
packets from its own :class:`Subscription`.

H.264 on a hardware encoder where one works here, libx264 otherwise (VP8, libvpx, for peers
without H.264: :mod:`~edgepipe.serve.codecs`). Settings are for live viewing, not for files:
zero-latency tuning, no B-frames, constrained baseline profile, Annex B (SPS/PPS repeated
before every IDR), an IDR at least every ``keyframe_interval_s`` and soon after
:meth:`SharedEncoder.request_keyframe` (a viewer joins, lags or sends PLI/FIR). Packets carry
pts in a 90 kHz time base (:func:`~edgepipe.wire.messages.pts_90k`), the timeline of the data
channel's results.

Threads: :meth:`SharedEncoder.encode` blocks (the CPU budget gate, then libx264) and runs on a
worker thread (:class:`WebRTCOut` is a sink, so the runtime calls it on the sink's thread);
subscriptions live on the event loop, and packets reach them with ``call_soon_threadsafe``.
A subscriber's queue is small and bounded: when it is full the viewer is lagging, its queue is
flushed and it waits for the next keyframe, so a slow viewer never slows the pipeline or the
other viewers.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from fractions import Fraction
from typing import Any

import av
import av.error
from av.video.frame import PictureType

from edgepipe.core import threadname
from edgepipe.core.context import current_node
from edgepipe.core.errors import OutputError
from edgepipe.media.frame import Frame
from edgepipe.media.recording.recorder import Colour, to_av_nv12
from edgepipe.sched.gate import AdmissionTimeout, Ticket, gate
from edgepipe.sched.ledger import ticket_tag
from edgepipe.serve.codecs import open_live
from edgepipe.wire.messages import pts_90k

log = logging.getLogger(__name__)

TIME_BASE_90K = Fraction(1, 90_000)
ENCODE_WAIT_S = 0.5
"""The longest a live encode waits for the CPU budget; past it the frame is skipped (counted)."""
MIN_KEYFRAME_GAP_S = 0.25
"""Keyframe requests closer than this to the last keyframe wait for it: a viewer that keeps
lagging must not turn every frame into an IDR for everyone."""


class Subscription:
    """One viewer's bounded queue of packets from a :class:`SharedEncoder` (event loop side).

    It starts waiting for a keyframe: a decoder can only start from one."""

    def __init__(self, encoder: SharedEncoder, loop: asyncio.AbstractEventLoop, max_packets: int) -> None:
        self.encoder = encoder
        self.loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue(max_packets)
        self.waiting_keyframe = True
        self.lagged = 0
        """Times this viewer fell behind (its queue was full) and was flushed."""
        self.dropped = 0
        """Packets not queued for it: flushed, or skipped while it waited for a keyframe."""
        self.closed = False

    def deliver(self, packet: Any) -> None:
        """Queue one packet (on the loop; never blocks)."""
        if self.closed:
            return
        if self.waiting_keyframe:
            if not packet.is_keyframe:
                self.dropped += 1
                return
            self.waiting_keyframe = False
        if self._queue.full():
            self.dropped += self._queue.qsize() + 1
            while not self._queue.empty():
                self._queue.get_nowait()
            self.waiting_keyframe = True
            self.lagged += 1
            self.encoder.lagged += 1
            self.encoder.request_keyframe()
            return
        self._queue.put_nowait(packet)

    async def get(self) -> Any:
        """The next packet; None once closed."""
        if self.closed:
            return None
        return await self._queue.get()

    def close(self) -> None:
        """Stop receiving (idempotent); a pending :meth:`get` returns None."""
        if self.closed:
            return
        self.closed = True
        self.encoder.unsubscribe(self)
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(None)


class SharedEncoder:
    """Encodes one source's frames to H.264 once, for every subscriber. Thread-safe.

    ``codec`` is ``auto`` (the best H.264 encoder here, hardware where one works) or an FFmpeg
    encoder name (``libx264``; ``libvpx`` for VP8; see :mod:`~edgepipe.serve.codecs`). Nothing
    is encoded while there are no subscribers. Raises :class:`~edgepipe.core.errors.OutputError` when the
    encoder cannot open.
    """

    def __init__(
        self,
        source_id: str,
        *,
        codec: str = "auto",
        bitrate_bps: int = 2_000_000,
        keyframe_interval_s: float = 2.0,
        queue_packets: int = 8,
    ) -> None:
        if bitrate_bps <= 0:
            raise ValueError(f"bitrate_bps must be positive, not {bitrate_bps}")
        if not 0 < keyframe_interval_s < float("inf"):
            raise ValueError(f"keyframe_interval_s must be positive, not {keyframe_interval_s}")
        if queue_packets < 1:
            raise ValueError(f"queue_packets must be at least 1, not {queue_packets}")
        self.source_id = source_id
        self.codec = codec
        self.bitrate_bps = bitrate_bps
        self.keyframe_interval_s = keyframe_interval_s
        self.queue_packets = queue_packets
        self.encodes = 0
        """Frames encoded (once each, however many viewers)."""
        self.skipped = 0
        """Frames not encoded because the CPU budget did not admit them in time."""
        self.lagged = 0
        """Times a viewer fell behind and was flushed to the next keyframe (all viewers)."""
        self.ticket = Ticket(source_id, "encode", 2, short=True)
        self._threads_tag = ticket_tag(self.ticket)
        """The encoder's threads are the node's encode (the CPU ledger)."""
        self._subs: list[Subscription] = []
        self._lock = threading.Lock()  # guards _subs and the keyframe flag
        self._encode_lock = threading.Lock()  # one encode at a time
        self._closed = False
        self._ctx: Any = None
        self._size: tuple[int, int] | None = None
        self._colour: Colour | None = None
        self._keyframe_wanted = True
        self._last_keyframe_s = float("-inf")
        self._last_pts = -1

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subs)

    def subscribe(self) -> Subscription:
        """A new viewer's subscription (call on the event loop that will read it). Asks for a
        keyframe, which the viewer waits for."""
        sub = Subscription(self, asyncio.get_running_loop(), self.queue_packets)
        with self._lock:
            self._subs.append(sub)
        self.request_keyframe()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def request_keyframe(self) -> None:
        """The next frame encoded (at least :data:`MIN_KEYFRAME_GAP_S` after the last keyframe)
        is an IDR. Any thread."""
        with self._lock:
            self._keyframe_wanted = True

    def encode(self, frame: Frame) -> int:
        """Encode ``frame`` and hand its packets to every subscriber; the number of packets.
        Blocking: call it on a worker thread. The frame is copied; the caller keeps its lease."""
        with self._lock:
            subs = list(self._subs)
        if not subs:
            return 0
        with self._encode_lock:
            if self._closed:
                return 0
            av_frame = self._prepare(frame)
            forced = av_frame.pict_type == PictureType.I
            try:
                with gate().admit(self.ticket, timeout_s=ENCODE_WAIT_S):
                    packets = self._ctx.encode(av_frame)
            except AdmissionTimeout:
                self.skipped += 1
                if forced:  # the keyframe a viewer waits for goes on the next frame instead
                    self.request_keyframe()
                return 0
            except (av.error.FFmpegError, OSError, ValueError) as exc:
                if forced:
                    self.request_keyframe()
                raise OutputError(f"cannot encode: {exc}", path=f"webrtc:{self.source_id}") from exc
            self.encodes += 1
        for packet in packets:
            packet.time_base = TIME_BASE_90K
            if packet.is_keyframe:
                self._last_keyframe_s = time.monotonic()
            for sub in subs:
                try:
                    sub.loop.call_soon_threadsafe(sub.deliver, packet)
                except RuntimeError:  # its loop is closed: the viewer is gone
                    self.unsubscribe(sub)
        return len(packets)

    def _prepare(self, frame: Frame) -> Any:
        size = (frame.width // 2 * 2, frame.height // 2 * 2)
        if size != self._size:
            self._colour = Colour.of(frame)
            self._open(*size)
        assert self._size is not None
        assert self._colour is not None
        # in the stream's colour: a later frame of another matrix or range is converted
        av_frame = to_av_nv12(frame, *self._size, self._colour.matrix, self._colour.full_range)
        # Strictly increasing (decode times are; a frame given twice must not stall the encoder).
        pts = max(pts_90k(frame.t_decoded_ns), self._last_pts + 1)
        self._last_pts = pts
        av_frame.pts = pts
        av_frame.time_base = TIME_BASE_90K
        now = time.monotonic()
        with self._lock:
            since_key_s = now - self._last_keyframe_s
            force = since_key_s >= self.keyframe_interval_s or (
                self._keyframe_wanted and since_key_s >= MIN_KEYFRAME_GAP_S
            )
            if force:
                self._keyframe_wanted = False
        # Reset when not forcing, or the encoder keeps the type the frame was given.
        av_frame.pict_type = PictureType.I if force else PictureType.NONE
        return av_frame

    def _open(self, width: int, height: int) -> None:
        try:
            with threadname.native_threads(self._threads_tag):  # they start as it opens
                ctx = open_live(self.codec, width, height, self.bitrate_bps, TIME_BASE_90K, self._colour)
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            raise OutputError(f"cannot open {self.codec}: {exc}", path=f"webrtc:{self.source_id}") from exc
        if self._ctx is not None:
            log.info("%s: frame size changed to %dx%d; encoder reopened", self.source_id, width, height)
        else:
            log.info("streaming %s with %s (%dx%d)", self.source_id, ctx.codec.name, width, height)
        self._ctx, self._size = ctx, (width, height)
        self._last_keyframe_s = float("-inf")  # a new encoder starts with an IDR

    def close(self) -> None:
        """Close every subscription and drop the encoder. Call it on the subscriptions' event
        loop (their queues are asyncio queues)."""
        with self._lock:
            subs, self._subs = self._subs, []
        for sub in subs:
            sub.close()
        with self._encode_lock:
            self._ctx, self._size = None, None
            self._closed = True


class WebRTCOut:
    """A sink that feeds one source's frames to a :class:`SharedEncoder` (and its VP8
    ``fallback``, for viewers without H.264; each encodes only while it has viewers):
    ``p.sink("webrtc", WebRTCOut(encoder), inputs=frames)`` (use ``policy="latest"``: a live
    view wants the newest frame, not every frame). Its calls run on the sink's worker thread."""

    priority = "high"

    def __init__(self, encoder: SharedEncoder, fallback: SharedEncoder | None = None) -> None:
        self.encoder = encoder
        self.fallback = fallback
        self.stream: Any = None
        """The :class:`~edgepipe.serve.webrtc_stream.WebRTCStream` it belongs to, if any (the app
        finds the viewers there)."""

    def start(self) -> None:
        try:
            ctx = current_node()
            self.encoder.ticket.set_owner(ctx.node_id, "encode", ctx.priority)
            if self.fallback is not None:
                self.fallback.ticket.set_owner(ctx.node_id, "encode", ctx.priority)
        except RuntimeError:
            pass

    def process(self, frame: Frame) -> None:
        self.encoder.encode(frame)
        if self.fallback is not None:
            self.fallback.encode(frame)
