"""Where a request is written: :class:`Engines`, the remote engine while it answers, the local
model otherwise, and never silently nowhere.

- With both: a request goes to the engine when its circuit is closed (or past its backoff) and
  a slot is free; otherwise, and when the engine fails before its first piece, the local model
  writes it (``engine: local``). A failure after the first piece ends that answer where it was
  cut (``stop_reason`` ``engine_failed``: its pieces were already sent); the next goes local.
- Remote only: a request waits for a slot in the engine's queue; with the circuit open or the
  queue full it is skipped, counted by cause (``skipped``), and said once per cause in the log.
- Each cause of failure is logged once (a warning with what happens next) until the engine
  answers again; then its return is logged, and a new outage is told again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass

from edgepipe.lm.remote.circuit import CLOSED, REFUSED
from edgepipe.lm.remote.engine import RemoteLM
from edgepipe.lm.remote.errors import EngineError
from edgepipe.lm.sampling import SamplingParams
from edgepipe.lm.stats import GenerationStats
from edgepipe.lm.worker import LMWorker

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Written:
    """Who wrote one request, with its figures; or why nobody did."""

    engine: str = ""
    """``remote``, ``local``, or empty: skipped."""
    stats: GenerationStats | None = None
    skipped: str = ""
    """Why no engine wrote it: ``circuit_open``, ``refused``, ``saturated``, or a failure's cause."""
    error: str = ""
    """The engine's failure that cut a remote answer short, or made the local model write it."""


class Engines:
    """The engines of one node: ``remote``, ``local``, or both (the local one the fallback)."""

    def __init__(self, remote: RemoteLM | None, local: LMWorker | None) -> None:
        if remote is None and local is None:
            raise ValueError("a remote engine or a local model, please")
        self.remote = remote
        self.local = local
        self.written: Counter[str] = Counter()
        """Requests written, by engine."""
        self.skipped: Counter[str] = Counter()
        """Requests nobody wrote, by cause."""
        self.failed: Counter[str] = Counter()
        """Remote failures, by cause (a fallback or a skip followed each)."""
        self.fallbacks = 0
        """Requests the local model wrote because the engine could not."""
        self._told: set[str] = set()
        self._cancels = 0
        """Bumped by :meth:`cancel`: a remote answer begun before it ends at its next piece."""

    def cancel(self) -> None:
        """End the answers under way at their next piece (a node that stops writing when the run
        stops); their events still come, ``stop_reason`` ``cancelled``."""
        self._cancels += 1
        if self.remote is not None:
            self.remote.cancel()
        if self.local is not None:
            self.local.cancel()

    @property
    def state(self) -> str:
        """The remote engine's circuit (``closed``, ``open``, ``half_open``, ``refused``), or
        ``local`` without one."""
        return self.remote.circuit.state if self.remote is not None else "local"

    async def write(self, prompt: str, params: SamplingParams, written: Written, *, chat: bool = True,
                    system: str | None = None, images: Sequence[str] = ()
                    ) -> AsyncGenerator[str, None]:  # fmt: skip
        """The answer's pieces, from whichever engine takes it; ``written`` says which."""
        remote, local = self.remote, self.local
        cause = ""
        cancels = self._cancels
        if remote is not None:
            if remote.takes(wait=local is None):
                got = False
                figures: list[GenerationStats] = []
                try:
                    async for piece in remote.generate(prompt, params, chat=chat, system=system,
                                                       images=images if remote.vision else (),
                                                       on_stats=figures.append):  # fmt: skip
                        got = True
                        yield piece
                        if self._cancels != cancels:
                            break  # the stream is closed with the generator: the server stops
                except EngineError as exc:
                    cause = exc.cause
                    self.failed[cause] += 1
                    self._tell(exc, got)
                    written.error = str(exc)
                    if got:  # its pieces are out: the answer ends where it was cut
                        written.engine = "remote"
                        written.stats = figures[0] if figures else remote.last_stats
                        written.stats.stop_reason = "engine_failed"
                        self.written["remote"] += 1
                        return
                else:
                    if self._told and self._cancels == cancels:
                        log.warning("engine %s answers again; requests go to it", remote.name)
                        self._told.clear()
                    written.engine = "remote"
                    written.stats = figures[0] if figures else remote.last_stats
                    if self._cancels != cancels:
                        written.stats.stop_reason = "cancelled"
                    self.written["remote"] += 1
                    return
            elif remote.circuit.state == REFUSED:
                cause = "refused"
            else:
                cause = "saturated" if remote.circuit.state == CLOSED else "circuit_open"
        if local is None:
            written.skipped = cause or "circuit_open"
            self.skipped[written.skipped] += 1
            return
        if remote is not None:
            self.fallbacks += 1
        written.engine = "local"
        figures = []
        async for piece in local.generate(prompt, params, overflow="stop", chat=chat, system=system,
                                          on_stats=figures.append):  # fmt: skip
            yield piece
        written.stats = figures[0] if figures else local.last_stats
        self.written["local"] += 1

    def _tell(self, error: EngineError, cut: bool) -> None:
        """Log a failure's cause once (until the engine answers again)."""
        if error.cause in self._told:
            log.debug("%s", error)
            return
        self._told.add(error.cause)
        assert self.remote is not None
        circuit = self.remote.circuit
        if circuit.state == REFUSED:
            then = "no request goes to it in this run: fix the configuration and restart"
        elif circuit.state == CLOSED:
            then = "this request only"
        else:
            then = f"tried again in {circuit.retry_in_s():.0f} s"
        where = (
            "the local model writes meanwhile" if self.local is not None else "requests are skipped meanwhile"
        )
        log.warning("%s%s; %s; %s", error, " (its answer ends where it was cut)" if cut else "", then, where)


__all__ = ["Engines", "Written"]
