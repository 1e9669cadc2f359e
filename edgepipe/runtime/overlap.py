"""The processing side of an overlapped two-step node (:mod:`edgepipe.runtime.prepared`).

``process()`` runs on a thread of the node's own, and the next prepared item is queued on that
thread behind the run in progress: when a run ends, the next starts at once, without waiting
for the event loop to hear of the end and hand the next one over (a round trip that costs
0.3-1 ms on a small or virtual machine, where an idle core takes that long to wake). The event
loop collects results in order, applies deadlines (from the moment each run starts) and the
error policy, and emits.

At most two items are on the thread: the one running and the one queued behind it. The
preparer (the other side) waits until the queued one starts before it prepares another: two
deep, as the module contract of :mod:`edgepipe.runtime.prepared` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from edgepipe.core import cputime
from edgepipe.core.errors import NodeError, NodeStuck, NodeTimeout
from edgepipe.core.executor import DaemonThreadPool
from edgepipe.core.lease import Leased, hand_on
from edgepipe.core.spans import PROCESS
from edgepipe.graph.spec import NodeKind
from edgepipe.runtime.calls import abandon
from edgepipe.runtime.parts import NodeParts

_clock = time.perf_counter_ns

MAX_HUNG_THREADS = 16
"""Runs abandoned at their deadline whose threads have not returned, after which the node
stops the pipeline (:class:`NodeStuck`) instead of starting yet another thread."""
STUCK_AFTER_S = 60.0
"""Or: at least two such threads, the oldest hung this long. A stall that passes (a device
busy for a while) lets its threads return, and the circuit breaker rides it out meanwhile."""


class Job:
    """One prepared item given to the processing thread."""

    __slots__ = ("deadline_ns", "future", "light", "prepared", "ran_ns", "started_ns", "submitted_ns")

    def __init__(self, prepared: Any) -> None:
        self.prepared = prepared
        self.light = bool(getattr(prepared, "light", False))
        """The prepared item says its processing is light (a detector's frame that the tracker
        carries, not the model): it is timed apart from the heavy ones."""
        self.future: Future[Any] = Future()
        self.submitted_ns = _clock()
        self.started_ns = 0
        """When it started running (0 while queued): when the one before it ended, or when it
        was given to an idle thread."""
        self.deadline_ns = 0
        self.ran_ns = (0, 0)
        """(start, end) of ``process()``, as the thread saw them."""

    def run(self, process: Callable[[Any], Any], key: tuple[str, str]) -> Any:
        """On the processing thread; its CPU counted under ``key`` (the node's ``code``)."""
        t0 = _clock()
        cputime.begin(key)
        try:
            return process(self.prepared)
        finally:
            cputime.end()
            self.ran_ns = (t0, _clock())


class Overlap:
    """What the two sides share: the jobs on the processing thread, when the preparer must
    wake, and the running means that time a just-in-time preparation."""

    __slots__ = (
        "_for_preparer",
        "_for_processor",
        "_hung",
        "_pool",
        "_process",
        "_timeout_ns",
        "_timeout_s",
        "abandoned_ns",
        "ended",
        "jobs",
        "light_ns",
        "name",
        "prepare_ns",
        "process_ns",
        "process_spread_ns",
    )

    def __init__(self, name: str, process: Callable[[Any], Any], timeout_s: float | None) -> None:
        self.name = name
        self._process = process
        self._timeout_s = timeout_s
        self._timeout_ns = None if timeout_s is None else int(timeout_s * 1e9)
        self._pool = DaemonThreadPool(1, f"{name}-process", spare_workers=0)
        self._hung: list[tuple[int, Future[Any]]] = []
        """Runs abandoned at their deadline, each keeping a thread until it returns."""
        self.jobs: deque[Job] = deque()
        """On the processing thread, in order: the running one, then at most one queued."""
        self.ended = False
        """The preparer has no more items."""
        self.abandoned_ns = 0
        """How long the last run abandoned at its deadline had run (busy time, counted)."""
        self._for_preparer: asyncio.Future[None] | None = None
        self._for_processor: asyncio.Future[None] | None = None
        self.process_ns = 0.0
        self.prepare_ns = 0.0
        """Running means of the two steps."""
        self.process_spread_ns = 0.0
        """Running mean of how far a processing time is from the mean."""
        self.light_ns = 0.0
        """Running mean of the light jobs' processing (a detector's tracked frames): a mean over
        both kinds would expect a tracked frame to take a model run's share, and the preparer
        would wait that long while the model's thread stood idle."""

    # -- the preparer's side ------------------------------------------------------------------

    def submit(self, prepared: Any) -> None:
        """Queue ``prepared`` on the processing thread."""
        job = Job(prepared)
        job.future = self._pool.submit(job.run, self._process, (self.name, cputime.CODE))
        if not self.jobs:
            self._started(job, _clock())
        self.jobs.append(job)
        _wake(self._for_processor)

    def queued(self) -> bool:
        """Whether a job waits behind the running one (the preparer must not go deeper)."""
        return len(self.jobs) > 1

    def end(self) -> None:
        self.ended = True
        _wake(self._for_processor)

    def remaining_ns(self) -> float:
        """How long until the processing thread is expected to be free (0 when idle)."""
        if not self.jobs:
            return 0.0
        running = self.jobs[0]
        expected = sum(self.light_ns if job.light else self.process_ns for job in self.jobs)
        return expected - (_clock() - running.started_ns)

    async def preparer_wait(self, timeout_ns: float | None = None) -> None:
        """Wait for a job to end or start (with ``timeout_ns``, at most that long)."""
        fut = self._for_preparer = asyncio.get_running_loop().create_future()
        try:
            if timeout_ns is None:
                await fut
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout_ns / 1e9):
                        await fut
        finally:
            self._for_preparer = None

    # -- the processor's side -----------------------------------------------------------------

    def _started(self, job: Job, at_ns: int) -> None:
        job.started_ns = at_ns
        if self._timeout_ns is not None:
            job.deadline_ns = at_ns + self._timeout_ns

    async def next_done(self) -> Job | None:
        """The running job once it ends (None when there are no more). Raises
        :class:`NodeTimeout` when it runs past its deadline: it is then abandoned to its thread
        (a fresh thread takes over, with the queued job); :class:`NodeStuck` when abandoned runs
        hold too many threads for too long (see :data:`STUCK_AFTER_S`)."""
        while not self.jobs:
            if self.ended:
                return None
            fut = self._for_processor = asyncio.get_running_loop().create_future()
            try:
                await fut
            finally:
                self._for_processor = None
        job = self.jobs[0]
        waiting = asyncio.wrap_future(job.future)
        try:
            if not job.deadline_ns:
                await asyncio.shield(waiting)
            else:
                async with asyncio.timeout((job.deadline_ns - _clock()) / 1e9):
                    await asyncio.shield(waiting)
        except TimeoutError as exc:
            # Still running (else process() itself raised it: its failure, read below), unless
            # it ended just now and the thread went on to the queued job, which then cannot be
            # taken back: then this one is done after all.
            queued = self.jobs[1] if len(self.jobs) > 1 else None
            if not job.future.done() and (queued is None or queued.future.cancel()):
                waiting.add_done_callback(_retrieved)  # nobody awaits it now
                self._abandon_running(queued)
                stuck = self._stuck_s()
                if stuck is not None:
                    raise NodeStuck(
                        f"process() ran past timeout_s={self._timeout_s} and {len(self._hung)} of its "
                        f"threads have not returned, the oldest for {stuck:.0f} s: the device or driver "
                        "is stuck; restart the process",
                        node_id=self.name,
                    ) from exc
                raise NodeTimeout(
                    f"call took longer than timeout_s={self._timeout_s}", node_id=self.name
                ) from exc
            await asyncio.wait([waiting])
        except Exception:  # process() failed: the caller reads that from the future
            pass
        self.jobs.popleft()
        if self.jobs:
            # The thread went on to the next job when this one ended, or when it was given the
            # next (if that came later: this one had ended before the loop collected it).
            following = self.jobs[0]
            self._started(following, max(job.ran_ns[1], following.submitted_ns))
        _wake(self._for_preparer)
        return job

    def measured(self, elapsed_ns: int, light: bool = False) -> None:
        if light:
            self.light_ns = _mean(self.light_ns, elapsed_ns)
            return
        if self.process_ns:
            self.process_spread_ns = _mean(self.process_spread_ns, abs(elapsed_ns - self.process_ns))
        self.process_ns = _mean(self.process_ns, elapsed_ns)

    def _abandon_running(self, queued: Job | None) -> None:
        """The running job hangs: leave it to its thread and give the queued one (already
        cancelled there) to a fresh thread."""
        job = self.jobs.popleft()
        self.jobs.clear()
        self.abandoned_ns = _clock() - job.started_ns
        self._let_go(job)
        now = _clock()
        self._hung = [(t, f) for t, f in self._hung if not f.done()]
        self._hung.append((now, job.future))
        self._pool.shutdown(wait=False)
        self._pool = DaemonThreadPool(1, f"{self.name}-process", spare_workers=0)
        if queued is not None:
            self.submit(queued.prepared)
        _wake(self._for_preparer)

    def _stuck_s(self) -> float | None:
        """How long the oldest abandoned run has hung, when that means the node is stuck: as
        many threads hung as a one-step node's executor may add, or two for a minute (a stall
        that passes lets its threads return, and they are no longer counted)."""
        if not self._hung:
            return None
        oldest_s = (_clock() - self._hung[0][0]) / 1e9
        if len(self._hung) >= MAX_HUNG_THREADS or (len(self._hung) >= 2 and oldest_s >= STUCK_AFTER_S):
            return oldest_s
        return None

    @staticmethod
    def _let_go(job: Job) -> None:
        """Leave a running job to its thread: its item stays leased to the thread until it
        returns (and a late pooled result is released then); our own reference goes now."""
        abandon(job.future, job.prepared)
        if isinstance(job.prepared, Leased):
            job.prepared.release()

    def close(self) -> None:
        """At the end of the node (or its cancellation): jobs not started are dropped, a
        running one is left to finish on its own, keeping its item's lease until then."""
        while self.jobs:
            job = self.jobs.pop()
            if job.future.cancel():
                if isinstance(job.prepared, Leased):
                    job.prepared.release()
            elif not job.future.done():
                self._let_go(job)
            else:
                _drop(job)
        self._pool.shutdown(wait=False)


async def run_processor(node: NodeParts, overlap: Overlap) -> None:
    """Collect results in order until the preparer has ended and every job is done."""
    stage = node.spec.kind is NodeKind.STAGE
    circuit = node.circuit
    m = node.metrics
    while True:
        try:
            job = await overlap.next_done()
        except NodeError as timeout:  # NodeTimeout; NodeStuck, which stops the run
            m.record(overlap.abandoned_ns)
            await circuit.failed(timeout, restart_hooks=False)
            continue
        if job is None:
            return
        error = job.future.exception()
        if error is not None:
            m.record(job.ran_ns[1] - job.ran_ns[0])
            if isinstance(job.prepared, Leased):
                job.prepared.release()
            await circuit.failed(error, restart_hooks=False)
            continue
        out = job.future.result()
        elapsed = job.ran_ns[1] - job.ran_ns[0]
        if m.spans is not None:
            m.spans.add(PROCESS, *job.ran_ns)
        overlap.measured(elapsed, job.light)
        m.record(elapsed)
        if hand_on(job.prepared, out, stage):
            await node.outputs.emit(out)
        if circuit.failures:
            await circuit.succeeded()


def _drop(job: Job) -> None:
    """A finished job nobody will collect: release its item and a pooled result."""
    if job.future.exception() is None:
        out = job.future.result()
        if out is not job.prepared and isinstance(out, Leased):
            out.release()
    if isinstance(job.prepared, Leased):
        job.prepared.release()


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Read an abandoned run's outcome, so that asyncio does not log it as never retrieved."""
    if not fut.cancelled():
        fut.exception()


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


def _mean(mean: float, sample: float) -> float:
    return sample if mean == 0.0 else mean * 0.8 + sample * 0.2
