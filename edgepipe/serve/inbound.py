"""What a viewer may send on a data channel: a keyframe request, and nothing else. Its player's
RTCP keyframe requests (PLI, FIR) go through the same limit (:meth:`ViewerInbox.rtcp_keyframe`).

The server listens on every data channel of a viewer's peer: its own ``results`` channel and any
channel the viewer opens. A message is a msgpack map with ``v`` and ``kind``, as on ``results``
(:mod:`edgepipe.wire.messages`). One kind is understood:

``keyframe``: ``{"v": 1, "kind": "keyframe"}``, or with ``"source": "camera"`` for one track:
    asks the shared encoder of that source (of every source the viewer watches when none is
    named) for an IDR soon, so a player that lost packets resumes without waiting for the
    periodic one. Every viewer shares that encoder: at most one request per
    :data:`KEYFRAME_EVERY_S` per viewer is passed on, the others are counted in ``ignored``.

Anything else (text, bytes that are not msgpack, not a map, another ``v``, an unknown kind or
source, more than :data:`MAX_MESSAGE_BYTES`) is dropped and counted in ``dropped``, with at most
one log line per viewer per :data:`~edgepipe.serve.security.LOG_WINDOW_S` (the next one says how
many were left out). Nothing a viewer sends raises into aiortc: an exception in a channel's
``message`` handler would reach its SCTP transport.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiortc.rtcdatachannel import RTCDataChannel

from edgepipe.serve.encoder import SharedEncoder
from edgepipe.serve.security import LogBudget, printable
from edgepipe.serve.tracks import PacketTrack
from edgepipe.wire import messages

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 4096
"""The largest message read; a keyframe request is about 30 bytes."""
KEYFRAME_EVERY_S = 1.0
"""A viewer's keyframe requests closer together than this are ignored."""


class ViewerInbox:
    """The messages one viewer sends (event loop only). ``tracks`` is the viewer's tracks by
    source (read when a request comes, so it may be filled after)."""

    def __init__(
        self,
        viewer_id: str,
        tracks: Mapping[str, PacketTrack],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.viewer_id = viewer_id
        self.tracks = tracks
        self.received = 0
        """Messages that arrived, whatever they were."""
        self.keyframes = 0
        """Keyframe requests passed on to the encoders."""
        self.ignored = 0
        """Keyframe requests too close to the previous one."""
        self.dropped = 0
        """Messages that were not understood (garbage, unknown kinds, oversize)."""
        self._clock = clock
        self._t_keyframe = float("-inf")
        self._log = LogBudget(log, lines=1, clock=clock)

    def rtcp_keyframe(self, encoder: SharedEncoder) -> None:
        """A PLI or FIR from the viewer's player (RTCP): passed on to ``encoder`` under the same
        limit as a ``keyframe`` message. A player on a lossy link sends them often, and every
        viewer of the source pays for each keyframe."""
        now = self._clock()
        if now - self._t_keyframe < KEYFRAME_EVERY_S:
            self.ignored += 1
            return
        self._t_keyframe = now
        self.keyframes += 1
        encoder.request_keyframe()

    def listen(self, channel: RTCDataChannel) -> None:
        """Read every message ``channel`` receives."""
        channel.on("message", self.receive)

    def receive(self, data: Any) -> None:
        """One message from the viewer (``str`` or ``bytes``, as aiortc gives them). Never raises."""
        self.received += 1
        try:
            problem = self._handle(data)
        except Exception as exc:  # a bug here must cost one message, not the viewer's channel
            problem = f"cannot handle it ({type(exc).__name__}: {exc})"
        if problem is not None:
            self.dropped += 1
            self._log.warning("viewer %s: message dropped: %s", self.viewer_id, printable(problem[:120]))

    def _handle(self, data: Any) -> str | None:
        """None when understood, else why not."""
        if not isinstance(data, bytes):
            return f"{type(data).__name__} message (msgpack bytes expected)"
        if len(data) > MAX_MESSAGE_BYTES:
            return f"{len(data)} bytes (at most {MAX_MESSAGE_BYTES})"
        try:
            message = messages.unpack(data)
        except ValueError as exc:
            return str(exc)
        kind = message.get("kind")
        if kind != "keyframe":
            return f"unknown kind {str(kind)[:40]!r}"
        source = message.get("source")
        if source is None:
            encoders = [track.encoder for track in self.tracks.values()]
        elif isinstance(source, str) and source in self.tracks:
            encoders = [self.tracks[source].encoder]
        else:
            return f"keyframe for an unknown source {str(source)[:40]!r}"
        now = self._clock()
        if now - self._t_keyframe < KEYFRAME_EVERY_S:
            self.ignored += 1
            return None
        self._t_keyframe = now
        self.keyframes += 1
        for encoder in encoders:
            encoder.request_keyframe()
        return None
