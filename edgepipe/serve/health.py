"""``GET /health``: is every source live and producing? Judged from progress, not a heartbeat.

A :class:`ProgressTracker` remembers when each source's ``items_out`` last advanced. The server
samples it every :data:`SAMPLE_S` and again on each request, so a source that stalls (its
generator waits forever, its camera went dark) fails the check within ``stall_after_s`` even
while the process, the event loop and the heartbeat are all fine.

A source is healthy when its node is running, its ``source`` gauge (if its code reports one) is
``live``, and it produced an item within ``stall_after_s``. Before its first item it is
unhealthy too: nothing flows yet.

The app judges from a snapshot up to :data:`~edgepipe.serve.metrics.SNAPSHOT_MAX_AGE_S` (0.5 s)
old, shared with ``/metrics`` (:class:`~edgepipe.serve.metrics.SnapshotCache`): a probe or a
scraper polling in a loop costs the pipeline one snapshot per 0.5 s, and a stall is seen at most
that much later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgepipe.runtime.engine import Snapshot
from edgepipe.wire.redact import redact, redact_text

SAMPLE_S = 0.5
ENDED_STATES = frozenset({"done", "stopped", "cancelled", "failed"})


@dataclass
class _Progress:
    items_out: int
    t_seen: float
    """Monotonic time the tracker first saw the source."""
    t_advanced: float | None
    """Monotonic time its ``items_out`` last grew (None: it has produced nothing yet)."""


class ProgressTracker:
    """When each source last produced; :meth:`verdict` says whether all of them are healthy."""

    def __init__(self, stall_after_s: float = 4.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after_s = stall_after_s
        self._clock = clock
        self._sources: dict[str, _Progress] = {}

    def sample(self, snap: Snapshot) -> None:
        now = self._clock()
        for n in snap.nodes:
            if n.kind != "source":
                continue
            seen = self._sources.get(n.node_id)
            if seen is None:
                self._sources[n.node_id] = _Progress(n.items_out, now, now if n.items_out else None)
            elif n.items_out != seen.items_out:
                seen.items_out = n.items_out
                seen.t_advanced = now

    def verdict(
        self, snap: Snapshot, *, stopping: bool = False, urls: dict[str, str] | None = None
    ) -> tuple[bool, dict[str, Any]]:
        """``(healthy, body)``: the body names every source, its state and, when unhealthy, why.

        ``urls`` (node id -> source URL) are shown redacted beside the reasons."""
        self.sample(snap)
        now = self._clock()
        sources: dict[str, Any] = {}
        reasons: list[str] = []
        for n in snap.nodes:
            if n.kind != "source":
                continue
            progress = self._sources[n.node_id]
            ago = None if progress.t_advanced is None else now - progress.t_advanced
            state = n.gauges.get("source")
            reason = _reason(n.state, state, ago, self.stall_after_s, stopping)
            if reason is None and ago is None:
                reason = f"no items yet ({now - progress.t_seen:.1f} s since start)"
            entry: dict[str, Any] = {
                "ok": reason is None,
                "node_state": n.state,
                "source_state": state,
                "items_out": n.items_out,
                "last_item_s_ago": None if ago is None else round(ago, 3),
            }
            if urls and n.node_id in urls:
                entry["url"] = urls[n.node_id]
            if reason is not None:
                entry["reason"] = reason
                reasons.append(f"{n.node_id}: {reason}")
            sources[n.node_id] = entry
        healthy = not reasons and bool(sources)
        if not sources:
            reasons.append("the pipeline has no source")
        body = {
            "status": "ok" if healthy else "unhealthy",
            "uptime_s": round(snap.t_s, 3),
            "reasons": [redact_text(r) for r in reasons],
            "sources": redact(sources),
        }
        engines = engine_states(snap)
        if engines:  # shown, not judged: the cameras keep running while an engine is away
            body["engines"] = redact(engines)
        return healthy, body


ENGINE_GAUGES = ("engine", "engine_cause", "engine_slots", "remote", "fallbacks", "skipped")


def engine_states(snap: Snapshot) -> dict[str, dict[str, Any]]:
    """Each node that writes on a remote engine: its circuit (``engine``: closed, open,
    half_open, refused), the latest failure's cause, and its counts."""
    return {
        n.node_id: {key.removeprefix("engine_") if key != "engine" else "state": n.gauges[key]
                    for key in ENGINE_GAUGES if key in n.gauges}
        for n in snap.nodes
        if "engine" in n.gauges
    }  # fmt: skip


def _reason(
    node_state: str, source_state: Any, ago: float | None, stall_after_s: float, stopping: bool
) -> str | None:
    if node_state in ENDED_STATES:
        return f"stopped ({node_state})"
    if stopping:
        return "stopping"
    if node_state == "restarting":
        return "restarting after an error"
    if source_state is not None and source_state != "live":
        return str(source_state)  # connecting, stalled, reconnecting, ended
    if ago is not None and ago > stall_after_s:
        return f"stalled: no items for {ago:.1f} s"
    return None
