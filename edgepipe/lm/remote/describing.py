"""What ``Describe`` does for its engines beside writing: the pictures an engine that takes
images is sent, and the figures and states shown (gauges, ``engine_state`` messages, the run's
exit when nothing could be written). A mixin of :class:`~edgepipe.lm.describe.Describe`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from edgepipe.core.executor import DaemonThreadPool
from edgepipe.lm.remote.circuit import STATES
from edgepipe.lm.remote.engine import RemoteLM
from edgepipe.lm.remote.engines import Engines, Written
from edgepipe.lm.remote.images import Thumbnail, jpeg_data_uri, thumbnail
from edgepipe.lm.scene import SceneWindow
from edgepipe.lm.worker import LMWorker
from edgepipe.wire.results import Message

ENCODER = DaemonThreadPool(1, "jpeg")
"""Where the pictures are encoded (a daemon thread: a stuck encode never holds the exit)."""


class EngineParts:
    """Pictures and figures of a node that writes with :class:`~edgepipe.lm.remote.engines.Engines`."""

    remote: RemoteLM | None
    worker: LMWorker | None
    engines: Engines
    window: SceneWindow
    every_s: float
    _gauges: dict[str, Any]
    _thumbs: dict[str, Thumbnail]
    _told_state: tuple[str, str]
    images_skipped: int

    @property
    def failed_output(self) -> str | None:
        """A run asked for descriptions and none could be written: exit 1, with the causes."""
        engines = self.engines
        if sum(engines.written.values()) or not engines.skipped:
            return None
        causes = ", ".join(f"{n} {cause}" for cause, n in engines.skipped.most_common())
        where = self.remote.name if self.remote is not None else "the engine"
        total = sum(engines.skipped.values())
        return f"no description written: all {total} skipped ({causes}) on {where}; see the warnings above"

    @property
    def worker_name(self) -> str:
        return self.worker.model.name if self.worker is not None else ""

    def _show(self) -> None:
        """The engines' figures in the node's gauges (``--stats``, ``/metrics``, ``/health``)."""
        gauges, engines = self._gauges, self.engines
        if self.remote is not None:
            circuit = self.remote.circuit
            gauges["engine"] = circuit.state
            gauges["engine_state"] = STATES.index(circuit.state)
            gauges["engine_slots"] = self.remote.slots
            gauges["remote"] = engines.written["remote"]
            gauges["fallbacks"] = engines.fallbacks
            if circuit.cause:
                gauges["engine_cause"] = circuit.cause
            else:
                gauges.pop("engine_cause", None)
        if engines.skipped or self.remote is not None:
            gauges["skipped"] = sum(engines.skipped.values())

    def observe(self, item: Any, now: float | None = None) -> None:
        """Add an item to the window (what ``process`` does with each input), and keep a small
        copy of its frame for an engine that takes pictures (:mod:`edgepipe.lm.remote.images`)."""
        t = time.monotonic() if now is None else now
        self.window.observe(item, t)
        remote = self.remote
        frame = getattr(item, "frame", None)
        if remote is None or frame is None or not remote.vision:
            return
        source = str(getattr(item, "source_id", "") or "")
        kept = self._thumbs.get(source)
        if kept is None or t - kept.t >= min(1.0, self.every_s / 2):  # a fresh one, once a second
            self._thumbs[source] = thumbnail(frame, remote.engine.image_side, t)

    async def _pictures(self, source: str | None, now: float) -> list[str]:
        """The sources' latest pictures (of the window) as JPEG ``data:`` URIs, within the
        request's byte budget, encoded on a worker thread; none for an engine without images."""
        remote = self.remote
        if remote is None or not remote.vision or not self._thumbs:
            return []
        thumbs = [
            t for s, t in self._thumbs.items() if source in (None, s) and now - t.t <= self.window.window_s
        ]
        if not thumbs:
            return []
        each = remote.engine.image_bytes // len(thumbs)
        loop = asyncio.get_running_loop()
        uris = await loop.run_in_executor(ENCODER, lambda: [jpeg_data_uri(t, each) for t in thumbs])
        self.images_skipped += sum(u is None for u in uris)
        return [u for u in uris if u is not None]

    def _engine_state(self) -> Message | None:
        """An ``engine_state`` message when the remote engine's circuit changed since the last
        (MQTT retains it; viewers see it)."""
        if self.remote is None:
            return None
        circuit = self.remote.circuit
        state = (circuit.state, circuit.cause)
        if state == self._told_state:
            return None
        self._told_state = state
        return Message("engine_state", {
            "engine": self.remote.name, "state": circuit.state, "cause": circuit.cause,
            "error": circuit.error, "retry_in_s": round(circuit.retry_in_s(), 1),
            "fallback": self.worker is not None,
        })  # fmt: skip

    def _figures(self, written: Written) -> None:
        """The latest request's figures, by engine, in the gauges."""
        self._show()
        stats = written.stats
        if stats is not None and written.engine:
            self._gauges[f"{written.engine}_ttft_ms"] = round(stats.ttft_ms, 1)
            self._gauges[f"{written.engine}_tpot_ms"] = round(stats.tpot_ms, 2)
            self._gauges[f"{written.engine}_tokens_per_s"] = round(stats.decode_tokens_per_s, 1)
        lm = self.worker.lm if self.worker is not None else None
        if lm is not None:
            self._gauges["slots"] = lm.runner.slots
            spec = lm.decoder.speculation
            if spec.max_drafts:  # drafts kept per verify step (--stats shows it under the table)
                self._gauges["accepted/step"] = f"{spec.accepted_per_step:.2f}"


__all__ = ["EngineParts"]
