"""Viewers that went away without a word: the server asks each connected viewer, every
:data:`CHECK_INTERVAL_S`, whether it is still there, as ICE consent checks do (RFC 7675: a STUN
binding request on the pair in use, which every ICE agent answers), and ends one that answered
none for :data:`SILENCE_S`.

A page that closes its peer says so (DTLS and SCTP send their goodbyes, and the viewer ends at
once), but a browser that quits, crashes or loses its network says nothing. aiortc's own consent
checks (aioice's: every 5 s, the peer ended after 6 unanswered in a row) would keep its slot some
30 s, during which the next visitor is told "viewer limit reached"; aioice's settings are module
globals shared by every peer of the process, and each of its checks waits only 0.5 s for its
answer, so a busy loop would end live viewers if they were shortened.

Here a check is sent again while unanswered (after 0.5 s and 1.5 s, as STUN does) and waits
3.5 s in all: an answer late because this loop or the viewer is busy still counts. A viewer
stays as long as some check is answered within :data:`SILENCE_S` of the one before; one that
answers nothing is ended 3 to 3.5 s after its last answer. A browser answers on its network
thread, whatever its page is doing; a viewer silent that long for another reason (a process
stopped, a network down for seconds) is ended too, and the viewer page connects again by itself.

The checks use two attributes aioice keeps private (an ICE transport's ``_connection`` and its
``_nominated`` pairs; checked against aioice 0.13); without them the checks stop, with one
warning, and aioice's own expiry is left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from aioice import stun
from aiortc import RTCPeerConnection

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 0.5
"""Between the checks of a connected viewer (one at a time)."""
SILENCE_S = 3.0
"""A connected viewer that answered no check for this long is ended."""
RETRANSMISSIONS = 2
"""A check unanswered is sent again after 0.5 s and 1.5 s, and given up 3.5 s after it was sent."""


def _pairs(pc: RTCPeerConnection) -> Iterator[tuple[Any, Any]]:
    """Each ICE connection of ``pc`` (aioice's) with each pair it uses."""
    transports = {t.receiver.transport.transport for t in pc.getTransceivers() if t.receiver.transport}
    if pc.sctp is not None:
        transports.add(pc.sctp.transport.transport)
    for transport in transports:
        connection = transport._connection
        for pair in list(connection._nominated.values()):
            yield connection, pair


class Consent:
    """When each connected viewer last answered a check; :meth:`watch` asks them."""

    def __init__(self) -> None:
        self.answered: dict[str, float] = {}
        """Viewer id -> when it last answered (``time.monotonic()``; first: when it was seen
        connected)."""
        self._asking: set[str] = set()
        self._reported: set[str] = set()
        self._broken = False

    async def watch(
        self, viewers: Callable[[], dict[str, RTCPeerConnection]], gone: Callable[[str, str], None]
    ) -> None:
        """Until cancelled: every :data:`CHECK_INTERVAL_S`, check each connected viewer of
        ``viewers()`` (by id) that has no check waiting, and call ``gone(viewer_id, why)`` once
        for one silent for :data:`SILENCE_S`."""
        async with asyncio.TaskGroup() as tg:
            while True:
                now = time.monotonic()
                current = viewers()
                for viewer_id in [v for v in self.answered if v not in current]:
                    del self.answered[viewer_id]
                    self._reported.discard(viewer_id)
                for viewer_id, pc in current.items():
                    if self._broken or pc.connectionState != "connected" or viewer_id in self._reported:
                        continue
                    silent_s = now - self.answered.setdefault(viewer_id, now)
                    if silent_s > SILENCE_S:
                        self._reported.add(viewer_id)
                        gone(viewer_id, f"it answered no ICE consent check for {silent_s:.1f} s")
                    elif viewer_id not in self._asking:
                        self._asking.add(viewer_id)
                        tg.create_task(self._ask(viewer_id, pc), name=f"consent {viewer_id}")
                await asyncio.sleep(CHECK_INTERVAL_S)

    async def _ask(self, viewer_id: str, pc: RTCPeerConnection) -> None:
        try:
            for connection, pair in list(_pairs(pc)):
                request = connection.build_request(pair, nominate=False)
                key = connection.remote_password.encode("utf8")
                await pair.protocol.request(
                    request, pair.remote_addr, integrity_key=key, retransmissions=RETRANSMISSIONS
                )
            # every pair in use answered (no pair: nothing to ask on, no silence to hold against it)
            if viewer_id in self.answered:
                self.answered[viewer_id] = time.monotonic()
        except (stun.TransactionError, ConnectionError):
            pass  # unanswered (or refused, or the viewer is closing): its silence goes on
        except (AttributeError, TypeError) as exc:
            if not self._broken:
                self._broken = True
                log.warning(
                    "ICE consent checks of viewers stopped (%s: %s): a viewer gone without a word "
                    "keeps its slot until aiortc's own expiry (30 s)",
                    type(exc).__name__,
                    exc,
                )
        finally:
            self._asking.discard(viewer_id)
