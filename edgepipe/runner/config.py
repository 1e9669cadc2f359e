"""How a run goes: :class:`RunConfig`, the one set of choices that :func:`edgepipe.run`,
:func:`edgepipe.run_async`, ``edgepipe run`` and :func:`edgepipe.testing.run_pipeline` share.

Every value is checked here, when the options are made, so a wrong one is refused before
anything starts (``ValueError`` naming the field). A run that must not be governed says so
with ``governed=False``: the default is what ``edgepipe run`` does in production.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edgepipe.core.loop import LOOPS
from edgepipe.core.spans import SpanRecorder
from edgepipe.core.units import check_seconds
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.engine import Watcher


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """See the module docstring. Frozen: ``dataclasses.replace(options, duration_s=5)`` makes
    another."""

    governed: bool = True
    """Whether the governor may slow work to keep the headroom free. ``False`` (``--no-governor``):
    it measures, holds nothing back and paces nothing."""
    headroom: float | None = None
    """The share of the usable cores kept free, in [0, 1) (``None``: the pipeline's own, 0.3 unless
    it says otherwise; 0: ungoverned)."""
    duration_s: float | None = None
    """Stop (draining) after this long; ``None``: run until the sources end or a stop."""
    results_path: str | None = None
    """Write every result as a JSON line here (``-``: standard output; ``--results``)."""
    drain_timeout_s: float = 5.0
    """After a stop, how long what is queued may drain before everything is cancelled."""
    stop_timeout_s: float = 5.0
    """How long each node's ``stop()`` hook gets at most (sinks flush there)."""
    handle_signals: bool = False
    """Whether SIGINT, SIGTERM and SIGHUP stop the run (draining), a second one at once; a SIGHUP
    inherited as ignored (``nohup``) stays ignored, and each handler found before is put back.
    Without it Ctrl-C still stops the run that way, unless the program handles SIGINT itself."""
    workers: Mapping[str, int] = field(default_factory=dict)
    """Threads per resource, over the graph's own (``{"cpu": 2}``)."""
    debug: bool = False
    """asyncio's debug mode: a callback that blocks the event loop is logged."""
    port: int | None = None
    """Serve the viewer page, WebRTC, ``/metrics``, ``/health`` and ``/graph`` on this port (0: any
    free one; ``None``: no server). The address is taken before any node starts."""
    host: str = "127.0.0.1"
    """The address served on; another than loopback needs ``$EDGEPIPE_TOKEN``."""
    metrics_open: bool = False
    """``/metrics`` without the token (for a scraper on a trusted network)."""
    health_file: str | None = None
    """Keep a heartbeat in this file (:mod:`edgepipe.runtime.heartbeat`)."""
    tune_malloc: bool = True
    """Fix glibc's mmap threshold, for a flat RSS over months (:mod:`edgepipe.runtime.malloc`)."""
    loop: str = "auto"
    """The event loop of :func:`edgepipe.run`: ``auto`` (uvloop when installed), ``uvloop`` or
    ``asyncio``. :func:`edgepipe.run_async` runs on the loop it is awaited on."""
    watchers: Sequence[Watcher] = ()
    """Coroutines run beside the nodes until the run ends (``--stats`` is one)."""
    memory: MemoryPlan | None = None
    """The run's memory plan (``None``: a new one, announced once every node has started)."""
    spans: SpanRecorder | None = None
    """Where every call of every node is recorded (``edgepipe trace``)."""

    def __post_init__(self) -> None:
        if self.duration_s is not None:
            check_seconds("duration_s", self.duration_s, above=0)
        check_seconds("drain_timeout_s", self.drain_timeout_s, at_least=0)
        check_seconds("stop_timeout_s", self.stop_timeout_s, at_least=0)
        if self.headroom is not None and not (0 <= self.headroom < 1):
            raise ValueError(f"headroom must be in [0, 1), got {self.headroom}")
        if self.port is not None and not (0 <= self.port <= 65535):
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if self.loop not in LOOPS:
            raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {self.loop!r}")
        for resource, threads in self.workers.items():
            if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
                raise ValueError(
                    f"workers[{resource!r}] must be a whole number of threads ≥ 1, got {threads!r}"
                )
