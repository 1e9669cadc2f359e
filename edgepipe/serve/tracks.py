"""A viewer's video track: H.264 packets from a :class:`~edgepipe.serve.encoder.SharedEncoder`.

:class:`PacketTrack` returns ``av.Packet`` from ``recv()``: aiortc 1.16's
``RTCRtpSender._next_encoded_frame`` packetizes a packet (``H264Encoder.pack``) instead of
encoding a frame, so every viewer of a source shares one encode. The RTP timestamp is the
packet's pts (90 kHz) plus the sender's random offset, which :func:`rtp_offset` reads so that a
viewer can map RTP timestamps to pts without relying on its first frame being the first sent.

PLI/FIR: aiortc's sender answers them by calling its own ``_send_keyframe()``, which only sets a
flag its encoder reads when it encodes a *frame*; a packet track is never encoded there, so
:func:`forward_keyframe_requests` wraps that method on one sender instance to also ask the shared
encoder for a keyframe. It relies on that private method (checked against aiortc 1.16).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiortc import MediaStreamTrack, RTCRtpSender
from aiortc.mediastreams import MediaStreamError

from edgepipe.serve.encoder import SharedEncoder, Subscription


class PacketTrack(MediaStreamTrack):
    """One viewer's video of one source (kind ``video``). ``first_pts_90k`` is the pts of the
    first packet it returned (None before); ``on_first(first_pts_90k, rtp_offset)`` is called
    once that packet has gone out (at the next ``recv()``), with the sender's RTP clock offset
    (:func:`rtp_offset`; None where it cannot be read)."""

    kind = "video"

    def __init__(
        self, encoder: SharedEncoder, *, on_first: Callable[[int, int | None], None] | None = None
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.source_id = encoder.source_id
        self.subscription: Subscription | None = None
        """Made at the first :meth:`recv` (once the peer is connected): a viewer still
        connecting, or that never connects, holds no queue and asks for no keyframes."""
        self.first_pts_90k: int | None = None
        self.sent = 0
        self.sender: RTCRtpSender | None = None
        """The sender that sends this track (set by whoever adds it to a peer)."""
        self._on_first = on_first

    async def recv(self) -> Any:  # aiortc types it as Frame | Packet
        if self.readyState != "live":
            raise MediaStreamError
        if self.subscription is None:
            self.subscription = self.encoder.subscribe()
        packet = await self.subscription.get()
        if packet is None:
            self.stop()
            raise MediaStreamError
        if self.first_pts_90k is None:
            self.first_pts_90k = packet.pts
        elif self.sent == 1 and self._on_first is not None:  # the first packet has gone out
            self._on_first(self.first_pts_90k, rtp_offset(self.sender, self.first_pts_90k))
        self.sent += 1
        return packet

    def stop(self) -> None:
        super().stop()
        if self.subscription is not None:
            self.subscription.close()


def rtp_offset(sender: RTCRtpSender | None, pts_90k: int) -> int | None:
    """``(rtp - pts) mod 2**32`` of ``sender``: the random origin of its RTP clock, read once it
    has sent the packet of pts ``pts_90k`` (its latest). aiortc keeps it in a private attribute
    (``_RTCRtpSender__rtp_timestamp``, for its sender reports; checked against aiortc 1.16);
    None when it is not there."""
    rtp = getattr(sender, "_RTCRtpSender__rtp_timestamp", None)
    if not isinstance(rtp, int) or rtp == 0:
        return None
    return (rtp - pts_90k) % 2**32


def forward_keyframe_requests(sender: RTCRtpSender, request: Callable[[], None]) -> None:
    """Make this sender's PLI/FIR handling also call ``request()`` (which asks the shared
    encoder for a keyframe, within the viewer's limit: :meth:`~edgepipe.serve.inbound.
    ViewerInbox.rtcp_keyframe`)."""
    own: Callable[[], None] = sender._send_keyframe

    def send_keyframe() -> None:
        own()
        request()

    sender._send_keyframe = send_keyframe  # type: ignore[method-assign]
