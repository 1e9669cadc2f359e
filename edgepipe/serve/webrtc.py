"""Answering viewers: one aiortc peer per viewer, a packet track per source, a ``results`` channel.

:class:`Viewers` is what the HTTP app holds: ``await viewers.answer(sdp, "offer")`` returns
the answer for ``POST /offer`` (or WHEP), :meth:`Viewers.publish` sends a frame's results to
every viewer (from any thread: a sink's worker thread), :meth:`Viewers.close` ends one viewer
and :meth:`Viewers.close_all` every one at shutdown. Beyond ``limit`` concurrent viewers
:meth:`Viewers.answer` raises :class:`ViewerLimitError` (the app answers 503).

Video is H.264 when the offer has it (every browser does), else VP8 from the source's fallback
encoder (:attr:`Viewers.fallback`; aiortc packetizes VP8 packets as it does H.264 ones, so VP8
viewers share one encode too); an offer with neither raises :class:`OfferError`. Messages on the
data channel follow :mod:`edgepipe.wire.messages`; a viewer whose channel has more than
``max_buffered_bytes`` waiting loses messages rather than slowing anyone. The runtime's own
events (a source's state, a node's error) reach every viewer through :meth:`Viewers.hear`, and
a viewer whose channel opens is sent each source's latest state first.

:meth:`Viewers.run` (the HTTP server runs it in its task group) closes the peers whose
connection failed or closed, those whose ``results`` channel closed, and those that never
connected, and asks the connected ones whether they are still there (ICE consent checks,
:mod:`~edgepipe.serve.consent`): a viewer that went away without a word is ended within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiortc import RTCPeerConnection, RTCRtpCodecCapability, RTCRtpSender, RTCSessionDescription
from aiortc.exceptions import InvalidAccessError, InvalidStateError, OperationError
from aiortc.rtcdatachannel import RTCDataChannel

from edgepipe.core.errors import EdgepipeError
from edgepipe.serve import consent, ice
from edgepipe.serve.encoder import SharedEncoder
from edgepipe.serve.inbound import ViewerInbox
from edgepipe.serve.tracks import PacketTrack, forward_keyframe_requests
from edgepipe.wire import messages
from edgepipe.wire.results import Message

log = logging.getLogger(__name__)


CONNECT_DEADLINE_S = 20.0
"""A viewer not connected this long after its offer gives its slot up to the next one."""


class ViewerLimitError(EdgepipeError):
    """As many viewers as allowed are connected (HTTP 503)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"viewer limit reached ({limit} connected)")


class OfferError(EdgepipeError, ValueError):
    """An offer that cannot be answered (HTTP 400): malformed, or no codec we send."""


class Viewer:
    """One connected viewer: its peer, its tracks (by source) and its ``results`` channel."""

    def __init__(self, viewer_id: str, pc: RTCPeerConnection, max_buffered_bytes: int) -> None:
        self.t_offer = time.monotonic()
        self.viewer_id = viewer_id
        self.pc = pc
        self.tracks: dict[str, PacketTrack] = {}
        self.inbox = ViewerInbox(viewer_id, self.tracks)  # what the viewer sends (a keyframe request)
        self.channel: RTCDataChannel | None = None
        self.max_buffered_bytes = max_buffered_bytes
        self.sent_messages = 0
        self.dropped_messages = 0
        self._first_pts: dict[str, int] = {}
        self._rtp_offsets: dict[str, int | None] = {}
        self._synced: set[str] = set()

    def first_packet(self, source_id: str, pts_90k: int, rtp_offset: int | None) -> None:
        self._first_pts[source_id] = pts_90k
        self._rtp_offsets[source_id] = rtp_offset
        self._flush_sync()

    def opened(self, states: Iterable[dict[str, Any]]) -> None:
        """The channel is open: each source's latest state, then the syncs due."""
        for message in states:
            self._send(message)
        self._flush_sync()

    def _flush_sync(self) -> None:
        for source_id, pts in self._first_pts.items():
            sync = messages.sync_message(source_id, pts, self._rtp_offsets.get(source_id))
            if source_id not in self._synced and self._send(sync):
                self._synced.add(source_id)

    def send_results(self, message: dict[str, Any]) -> bool:
        """Send one results message (on the loop). A source's results that carry a pts wait for
        its ``sync``: before the viewer's first packet of that source they are dropped (it shows
        no video yet). False when the message was dropped."""
        source_id = message.get("source")
        if "pts_90k" in message and isinstance(source_id, str) and source_id in self.tracks:
            self._flush_sync()
            if source_id not in self._synced:
                self.dropped_messages += 1
                return False
        return self._send(message)

    def _send(self, message: dict[str, Any]) -> bool:
        channel = self.channel
        limit = self.max_buffered_bytes
        # A viewer that cannot keep up loses messages; nobody waits for it.
        if channel is None or channel.readyState != "open" or channel.bufferedAmount > limit:
            self.dropped_messages += 1
            return False
        channel.send(messages.pack(message))
        self.sent_messages += 1
        return True

    async def close(self) -> None:
        for track in self.tracks.values():
            track.stop()
        # aiortc 1.16 fails half-way closing a peer whose malformed offer left its SCTP transport
        # without a DTLS transport; nothing of that peer was started (tests/serve/test_fuzz.py).
        with contextlib.suppress(AttributeError):
            await self.pc.close()


_SDP_ERRORS = (ValueError, AssertionError, LookupError, AttributeError, TypeError, RuntimeError)
"""What aiortc's SDP parsing raises on a malformed offer (found by tests/serve/test_fuzz.py: a
missing ``a=setup`` is an AttributeError, an unknown role a KeyError, a short ``a=rtpmap`` an
IndexError, an ``a=fmtp`` for no codec a StopIteration, turned RuntimeError)."""


def _offered(sdp: str) -> str | None:
    """The codec to send: ``h264`` when the offer has it, else ``vp8``, else None."""
    lowered = sdp.lower()
    for codec in ("h264", "vp8"):
        if f" {codec}/90000" in lowered:
            return codec
    return None


def _codecs(codec: str) -> list[RTCRtpCodecCapability]:
    capabilities = RTCRtpSender.getCapabilities("video")
    return [c for c in capabilities.codecs if c.mimeType.lower() in (f"video/{codec}", "video/rtx")]


class Viewers:
    """The connected viewers of a pipeline and the encoders they watch (one per source).

    Call :meth:`answer`, :meth:`close` and :meth:`close_all` on the event loop; :meth:`publish`
    from any thread once a viewer has connected."""

    def __init__(
        self,
        encoders: Iterable[SharedEncoder] = (),
        *,
        fallback: Iterable[SharedEncoder] = (),
        limit: int = 4,
        max_buffered_bytes: int = 256 * 1024,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self.encoders: dict[str, SharedEncoder] = {e.source_id: e for e in encoders}
        """H.264, by source."""
        self.fallback: dict[str, SharedEncoder] = {e.source_id: e for e in fallback}
        """VP8, by source: for peers that offer no H.264."""
        self.limit = limit
        self.max_buffered_bytes = max_buffered_bytes
        self.viewers: dict[str, Viewer] = {}
        self.inbound_left = {"keyframe": 0, "ignored": 0, "dropped": 0}
        """What the viewers that left sent (:class:`~edgepipe.serve.inbound.ViewerInbox`'s counts)."""
        self.messages_sent = 0
        self.messages_dropped = 0
        """Data-channel messages not sent to a viewer: its channel was full or not open, or its
        video had not started (all viewers, since the start)."""
        self.states: dict[str, dict[str, Any]] = {}
        """Each source's latest ``source_state`` message, for viewers that join later."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ended: asyncio.Queue[tuple[str, str]] = asyncio.Queue(4 * limit)  # closed by run(), with why
        self._closing: set[asyncio.Task[bool]] = set()  # the upkeep's closes; close_all() waits for them
        self._consent = consent.Consent()

    async def answer(
        self,
        offer_sdp: str,
        offer_type: str = "offer",
        *,
        on_datachannel: Callable[[Viewer, RTCDataChannel], None] | None = None,
    ) -> tuple[Viewer, RTCSessionDescription]:
        """A new viewer and the answer to its offer. Raises :class:`ViewerLimitError` when
        ``limit`` viewers are connected and :class:`OfferError` for an offer that cannot be
        answered. ``on_datachannel`` is told of channels the viewer opens itself."""
        await self._drop_stuck()
        if len(self.viewers) >= self.limit:
            raise ViewerLimitError(self.limit)
        if offer_type != "offer":
            raise OfferError(f"expected an offer, not {offer_type!r}")
        codec = _offered(offer_sdp)
        encoders = self.encoders
        if codec == "vp8" and self.fallback:
            encoders = self.fallback
        elif self.encoders and codec != "h264":
            sent = "H.264 or VP8" if self.fallback else "H.264"
            raise OfferError(f"the offer has no video codec we send ({sent})")
        self._loop = asyncio.get_running_loop()
        ice.restrict_host_addresses()
        pc = RTCPeerConnection(ice.configuration())
        # Unguessable: the id is what DELETE /whep/{id} ends; counting ids would let anyone
        # allowed to call it end every other viewer (found by review).
        viewer = Viewer(secrets.token_urlsafe(12), pc, self.max_buffered_bytes)
        self.viewers[viewer.viewer_id] = viewer
        try:
            # Transceivers made before the offer is applied take its video m-lines, and their
            # codec preferences decide what is negotiated there: the encoder's codec only
            # (packets go out as they are; another codec would be handed them to packetize).
            for source_id, encoder in encoders.items():
                track = PacketTrack(encoder, on_first=functools.partial(viewer.first_packet, source_id))
                viewer.tracks[source_id] = track
                transceiver = pc.addTransceiver(track, direction="sendonly")
                track.sender = transceiver.sender
                transceiver.setCodecPreferences(_codecs(codec or "h264"))
                forward_keyframe_requests(
                    transceiver.sender, functools.partial(viewer.inbox.rtcp_keyframe, encoder)
                )
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type=offer_type))
            channel = viewer.channel = pc.createDataChannel("results", ordered=True)
            channel.on("open", lambda: viewer.opened(list(self.states.values())))
            # a peer that ends its SCTP association says so on the channel, not on the connection
            channel.on("close", lambda: self._end(viewer.viewer_id, "its results channel closed"))
            viewer.inbox.listen(channel)
            pc.on("datachannel", viewer.inbox.listen)
            if on_datachannel is not None:
                pc.on("datachannel", lambda ch: on_datachannel(viewer, ch))
            pc.on("connectionstatechange", lambda: self._state_changed(viewer))
            await pc.setLocalDescription(await pc.createAnswer())
        except (*_SDP_ERRORS, InvalidAccessError, InvalidStateError, OperationError) as exc:
            # aiortc's errors for an SDP it cannot parse or answer
            await self.close(viewer.viewer_id, "its offer could not be answered")
            raise OfferError(f"cannot answer this offer: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            await self.close(viewer.viewer_id, "interrupted while answering")
            raise
        shown = codec or "no video"
        log.info("viewer %s answered, %s (%d of %d)", viewer.viewer_id, shown, len(self.viewers), self.limit)
        return viewer, pc.localDescription

    async def _drop_stuck(self) -> None:
        """Close viewers still not connected :data:`CONNECT_DEADLINE_S` after their offer (an
        offer with unreachable candidates would otherwise hold a slot for good), and those whose
        connection ended but were not closed yet (their notice was lost: the queue was full)."""
        now = time.monotonic()
        for viewer_id, viewer in list(self.viewers.items()):
            state = viewer.pc.connectionState
            stuck = state in ("new", "connecting") and now - viewer.t_offer > CONNECT_DEADLINE_S
            if stuck or state in ("failed", "closed"):
                await self.close(viewer_id, "never connected" if stuck else f"connection {state}")

    def _state_changed(self, viewer: Viewer) -> None:
        if (state := viewer.pc.connectionState) in ("failed", "closed"):
            self._end(viewer.viewer_id, f"connection {state}")

    def _end(self, viewer_id: str, why: str) -> None:
        if viewer_id in self.viewers:
            # closed by run(); a full queue means run() is behind or not running: close_all()
            # at shutdown ends the viewer then
            with contextlib.suppress(asyncio.QueueFull):
                self._ended.put_nowait((viewer_id, why))

    async def run(self) -> None:
        """Close the viewers whose connection ended, whose ``results`` channel closed or that
        stopped answering ICE consent checks (:mod:`~edgepipe.serve.consent`), and every second
        those that never connected; until cancelled. The HTTP server runs it in its task group."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._consent.watch(self._peers, self._end), name="viewer consent")
            await self._upkeep()

    def _peers(self) -> dict[str, RTCPeerConnection]:
        return {viewer_id: viewer.pc for viewer_id, viewer in self.viewers.items()}

    async def _upkeep(self) -> None:
        while True:
            viewer_id, why = None, ""
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that
            # arrives as the get() completes, and this loop would then never end
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    viewer_id, why = await self._ended.get()
            try:
                if viewer_id is not None:
                    # The close goes on when the upkeep is cancelled meanwhile (the server stops
                    # as a viewer leaves): aiortc cannot take a close cut short up again, and the
                    # peer would keep its sockets (aioice's close would even swallow the
                    # cancellation). close_all() waits for it.
                    closing = asyncio.get_running_loop().create_task(self.close(viewer_id, why))
                    self._closing.add(closing)
                    closing.add_done_callback(self._closing.discard)
                    await asyncio.shield(closing)
                await self._drop_stuck()
            except Exception:  # one peer's close must not end the upkeep of the others
                log.exception("closing viewer %s failed", viewer_id)

    async def close(self, viewer_id: str, why: str = "closed") -> bool:
        """End one viewer (``why`` goes in the log line); False if there was none of that id."""
        viewer = self.viewers.pop(viewer_id, None)
        if viewer is None:
            return False
        inbox = viewer.inbox
        for outcome, n in (
            ("keyframe", inbox.keyframes),
            ("ignored", inbox.ignored),
            ("dropped", inbox.dropped),
        ):
            self.inbound_left[outcome] += n
        await viewer.close()
        log.info("viewer %s left (%s)", viewer_id, why)
        return True

    async def close_all(self) -> None:
        """End every viewer (shutdown), and wait for the closes whose callers were cancelled."""
        for viewer_id in list(self.viewers):
            await self.close(viewer_id, "the server is stopping")
        for closing in list(self._closing):
            with contextlib.suppress(Exception):
                await closing

    def inbound(self) -> dict[str, int]:
        """What viewers sent since the start, by outcome (keyframe, ignored, dropped)."""
        totals = dict(self.inbound_left)
        for viewer in self.viewers.values():
            inbox = viewer.inbox
            totals["keyframe"] += inbox.keyframes
            totals["ignored"] += inbox.ignored
            totals["dropped"] += inbox.dropped
        return totals

    def publish(self, item: Any) -> None:
        """Send one result (a frame's :class:`~edgepipe.vision.Detections`, a ``Message``: any
        item :func:`~edgepipe.wire.messages.message_of` takes) to every viewer. Any thread;
        never blocks."""
        loop = self._loop
        if loop is None or not self.viewers:
            return
        message = messages.message_of(item)
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            loop.call_soon_threadsafe(self._send_all, message)

    def hear(self, event: Message) -> None:
        """A runtime event (:meth:`~edgepipe.runtime.engine.Runtime.add_listener`, on the loop):
        sent to every viewer; a source's state is also kept for viewers that join later."""
        message = messages.message_of(event)
        if event.kind == "source_state" and isinstance(source := message.get("source"), str):
            message.pop("url", None)  # the page has no use for it; redacted, but still an address
            self.states[source] = message
        self._send_all(message)

    def _send_all(self, message: dict[str, Any]) -> None:
        for viewer in list(self.viewers.values()):
            if viewer.send_results(message):
                self.messages_sent += 1
            else:
                self.messages_dropped += 1
