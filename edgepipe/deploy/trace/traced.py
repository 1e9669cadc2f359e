"""Running a pipeline for ``edgepipe trace``: every node's spans, ONNX Runtime's profiles, the
buffers reserved during the run, and the energy used, gathered around one ordinary run.

The pipeline runs as under ``edgepipe run`` (:func:`edgepipe.runner.run`, governed); what
tracing adds is the run's own span recorder (:mod:`edgepipe.core.spans`), whose profile prefix
makes the models loaded for this run, and no other, profile their runs
(:mod:`edgepipe.infer.loading`), the run's own memory plan with a listener
(:attr:`~edgepipe.planning.memory.MemoryPlan.listeners`), and an energy meter.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgepipe.core import spans
from edgepipe.deploy.power.meter import Energy, EnergyMeter
from edgepipe.deploy.trace.ort import Profile, read_profile
from edgepipe.graph.check import Graph
from edgepipe.planning.memory import MemoryPlan, Reservation
from edgepipe.runner import RunConfig, run
from edgepipe.runtime.engine import RunReport

log = logging.getLogger(__name__)


@dataclass
class Allocation:
    """A reservation made in the memory plan during the run."""

    owner: str
    what: str
    nbytes: int
    after_start: bool
    """Made once every node had started (the plan was announced): sized by the first item,
    or rebuilt."""


@dataclass
class TraceRun:
    graph: Graph
    report: RunReport
    spans: dict[str, spans.SpanLog]
    profiles: list[Profile]
    allocations: list[Allocation]
    energies: list[Energy]
    meter: EnergyMeter
    epoch_offset_ns: int
    """``time.time_ns() - time.perf_counter_ns()`` at the start: spans onto the wall clock."""
    notes: list[str] = field(default_factory=list)


def run_traced(
    graph: Graph, duration_s: float, *, debug: bool = False, energy_root: Path = Path("/")
) -> TraceRun:
    """Run ``graph`` for ``duration_s`` (or until its sources end) with tracing on."""
    plan = MemoryPlan.for_run()
    allocations: list[Allocation] = []

    def reserved(r: Reservation) -> None:
        allocations.append(Allocation(r.owner, r.what, r.nbytes, plan.announced))

    meter = EnergyMeter(energy_root)
    with tempfile.TemporaryDirectory(prefix="edgepipe-trace-") as folder:
        recorder = spans.SpanRecorder(profile_prefix=str(Path(folder) / "ort_"))
        plan.listeners.append(reserved)
        offset = time.time_ns() - time.perf_counter_ns()
        meter.start()
        try:
            options = RunConfig(
                duration_s=duration_s,
                handle_signals=True,
                debug=debug,
                memory=plan,
                spans=recorder,
                tune_malloc=False,
            )
            report = run(graph, options)
        finally:
            energies = meter.stop()
            plan.listeners.remove(reserved)
            profiles, notes = _end_profiles(recorder)
    return TraceRun(graph, report, recorder.logs, profiles, allocations, energies, meter, offset, notes)


def _end_profiles(recorder: spans.SpanRecorder) -> tuple[list[Profile], list[str]]:
    profiles: list[Profile] = []
    notes: list[str] = []
    for name, path, session in recorder.profiled:
        try:
            start_ns = session.get_profiling_start_time_ns()
            written = session.end_profiling()
            profiles.append(read_profile(name, Path(written), start_ns, path))
        except Exception as exc:  # ONNX Runtime's errors are plain Exceptions
            notes.append(f"model {name}: no profile ({type(exc).__name__}: {exc})")
    recorder.profiled.clear()
    return profiles, notes
