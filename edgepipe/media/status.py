"""What a video source says about itself: its state and why, its counters, its decoder.

Written by the source's decode thread, read from anywhere: ints, a string and a tuple, each
replaced whole, so a reader needs no lock and never pairs a state with another state's reason.
The same figures go into the node's gauges (``--stats``, ``/metrics``) once the source runs in a
pipeline.
"""

from __future__ import annotations

import logging
from typing import Any

NO_HARDWARE = "no hardware decoder works here"
"""How the decoder choice's reason begins when the machine has none for the codec
(:func:`edgepipe.media.probe.choose`): the normal case on a CPU-only box, not a fault."""

log = logging.getLogger(__name__)


class SourceStatus:
    """One source's state, counters and decoder label. Outlives a restart of the source."""

    def __init__(self, source_id: str) -> None:
        self.source_id = source_id
        """The id its frames carry: the node's id once started in a pipeline, else the URL."""
        self.gauges: dict[str, Any] = {}
        """The node's gauges, given at start in a pipeline (a private dict otherwise)."""
        self.decoded = 0
        """Frames decoded: ``delivered + dropped``; the node emits ``delivered - unsent``."""
        self.delivered = 0
        self.dropped = 0
        """Frames decoded while consumers held every frame of the pool (live sources)."""
        self.unsent = 0
        """Frames decoded and delivered that the node never emitted: the run stopped first."""
        self.corrupt = 0
        self.reconnects = 0
        self.failovers = 0
        """Decoders replaced mid-stream because they failed on it (media.sources.failover)."""
        self.decoder_used = ""
        """What decodes: ``h264+cuda``, ``h264 (software)``, ``synthetic`` (empty before start)."""
        self.state_info: tuple[str, str] = ("idle", "")
        """(state, reason): connecting, live, stalled, reconnecting, ended (idle before start)."""

    def set_state(self, state: str, reason: str = "") -> bool:
        """Enter ``state`` for ``reason``; False, and nothing changes, when the source is in that
        state already and there is no new reason to tell."""
        if state == self.state_info[0] and not reason:
            return False
        self.state_info = (state, reason)
        self.update_gauges()
        return True

    def update_gauges(self) -> None:
        """Copy the counters into the gauges (the decode thread does it every few frames)."""
        g = self.gauges
        g["decoded"] = self.decoded
        if self.dropped:
            g["pool_drops"] = self.dropped
        if self.unsent:
            g["unsent"] = self.unsent
        if self.corrupt:
            g["corrupt"] = self.corrupt
        if self.reconnects:
            g["reconnects"] = self.reconnects
        if self.failovers:
            g["decoder_failovers"] = self.failovers

    def note_decoder(self, label: str, why: str) -> None:
        """Record what decodes; said once per change. Software because a hardware decoder
        failed or was refused (``why``) is a warning; software on a machine that has no hardware
        decoder for the codec is the normal case there: one INFO line, and why each one failed
        at DEBUG (``edgepipe probe`` says it too)."""
        if label == self.decoder_used:
            return
        self.decoder_used = label
        self.gauges["decoder"] = label
        if "software" in label and why.startswith(NO_HARDWARE):
            log.info("[%s] decoding %s: no hardware decoder on this machine (edgepipe probe says why)",
                     self.source_id, label)  # fmt: skip
            log.debug("[%s] %s", self.source_id, why)
        elif "software" in label and why:
            log.warning("[%s] decoding %s: %s", self.source_id, label, why)
        else:
            log.info("[%s] decoding with %s", self.source_id, label)

    def note_failover(self, label: str) -> None:
        """A failed decoder was replaced by ``label`` (the caller logs why): counted, shown."""
        self.failovers += 1
        self.decoder_used = label
        self.gauges["decoder"] = label
        self.update_gauges()
