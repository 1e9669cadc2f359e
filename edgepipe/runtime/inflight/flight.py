"""Calls in flight: a node's ``process()`` on up to ``instances`` threads at once, its results
collected in each lane's order (:mod:`edgepipe.runtime.inflight.steps` drives it).

The threads are the node's own, and one prepared item waits in their queue behind the calls
under way: when a call ends, its thread starts the next at once, without waiting for the event
loop to hand one over (0.3-1 ms on a small machine). The rest is the event loop's,
:class:`Flight`:

- **Order.** Each job belongs to its lane (the producer it came from); a lane's jobs leave in
  the order they were submitted, whatever order their calls end in. Lanes do not wait for one
  another: a camera's results never queue behind another camera's model run.
- **Light jobs.** A prepared item that says it is ``light`` (a detector's frame that the tracker
  carries: no model run) in a node that has ``finish()`` needs no thread: it is ready when
  submitted, and leaves as soon as the jobs before it in its lane have.
- **Deadlines.** Each call's deadline counts from when it starts (a call queued behind others is
  not late for waiting). One past it is abandoned: its thread leaves the pool when the call
  returns (:meth:`~edgepipe.core.executor.DaemonThreadPool.retire`) and a fresh thread takes its
  place, so the node keeps ``instances`` calls going. Abandoned calls whose threads never return
  stop the run (:class:`NodeStuck`), per node: :data:`MAX_HUNG_THREADS`, or two for
  :data:`STUCK_AFTER_S`.
- **Shedding.** A governor's knob may allow fewer calls than ``instances`` for a while
  (:class:`~edgepipe.core.context.CallLimit`): calls past that wait for one to end, prepared,
  rather than for the CPU budget on a thread.
- **Bounds.** At most the calls allowed run and one waits behind them (:meth:`Flight.room`);
  a lane holds at most :attr:`Flight.hold` items of the node's (prepared, running, or waiting
  for the ones before them), after which the preparer leaves that lane alone
  (:meth:`Flight.paused`) and its producer's channel keeps the rest, by its policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from edgepipe.core import cputime
from edgepipe.core.context import CallLimit
from edgepipe.core.errors import NodeStuck, NodeTimeout
from edgepipe.core.executor import DaemonThreadPool
from edgepipe.runtime.inflight.jobs import ABANDONED, DONE, FAILED, RUNNING, Job, drop, let_go
from edgepipe.runtime.metrics import NodeMetrics

_clock = time.perf_counter_ns

MAX_HUNG_THREADS = 16
"""Calls abandoned at their deadline whose threads have not returned, after which the node
stops the pipeline (:class:`NodeStuck`) instead of starting yet another thread."""
STUCK_AFTER_S = 60.0
"""Or: at least two such threads, the oldest hung this long. A stall that passes (a device
busy for a while) lets its threads return, and the circuit breaker rides it out meanwhile."""
RECHECK_S = 0.01
"""How soon a second call held back (its node said it would not start yet) is looked at again."""


class Flight:
    """The calls of one node under way, and its jobs waiting to leave in order. Event loop
    only; the threads touch nothing here but their job's future and timings."""

    def __init__(
        self, name: str, process: Callable[..., Any], *, calls: CallLimit, timeout_s: float | None,
        takes_lane: bool = False, light_path: bool = False, metrics: NodeMetrics | None = None,
    ) -> None:  # fmt: skip
        """``calls``: how many calls may run at once (``instances``), and how many now
        (``allowed``: a governor's knob may shed some, read before each call starts).
        ``light_path``: light prepared items skip ``process()`` (the node has ``finish()``).
        ``metrics``: where the calls in flight are shown (``in_flight``, ``instances``)."""
        if calls.instances < 1:
            raise ValueError(f"instances must be at least 1, got {calls.instances}")
        self.name = name
        self.calls = calls
        self.instances = calls.instances
        self.hold = self.instances + 1
        """Jobs of one lane the node keeps at most (``instances`` calls and one waiting behind
        them, or light ones waiting for a call before them): with the one being prepared, or
        the one being emitted, :meth:`in_hand` of its items."""
        self._process = process
        self._takes_lane = takes_lane
        self.light_path = light_path
        self._timeout_ns = None if timeout_s is None else int(timeout_s * 1e9)
        self._timeout_s = timeout_s
        self._pool = DaemonThreadPool(self.instances, f"{name}-process", spare_workers=0)
        self._metrics = metrics
        if metrics is not None:
            metrics.instances = self.instances
        self._loop = asyncio.get_running_loop()
        self.lanes: dict[str, deque[Job]] = {}
        """Per lane, its jobs not yet collected, in order."""
        self._held: deque[Job] = deque()
        """Calls prepared but not given to a thread yet (while fewer are allowed than there are
        threads, a thread would start one at once)."""
        self._queued: deque[Job] = deque()
        """A call given to the threads that none has started yet (every thread busy): the next
        to end starts it at once."""
        self._running: list[Job] = []
        self._recheck: asyncio.TimerHandle | None = None
        self._hung: list[tuple[int, Future[Any]]] = []
        """Calls abandoned at their deadline, each keeping a thread until it returns."""
        self.ended = False
        """The preparer has no more items."""
        self._for_collector: asyncio.Future[None] | None = None
        self._for_preparer: asyncio.Future[None] | None = None
        self.process_ns = 0.0
        """Running mean of a call's time (just-in-time preparation, :mod:`.preparer`)."""
        self.process_spread_ns = 0.0
        """Running mean of how far a call's time is from the mean."""
        self.prepare_ns = 0.0
        self.abandoned_ns = 0
        """How long the last call abandoned at its deadline had run (busy time, counted)."""

    @staticmethod
    def in_hand(instances: int) -> int:
        """Items of one producer a node holds at most beyond its inbox: a lane's jobs
        (:attr:`hold`), plus the one being prepared, or the one being emitted."""
        return instances + 2

    # -- the preparer's side ------------------------------------------------------------------

    @property
    def in_flight(self) -> int:  # calls running now
        return len(self._running)

    def _allowed(self) -> int:
        return max(1, min(self.instances, self.calls.allowed))

    def _pending(self) -> int:  # calls not ended: running, or waiting for a thread
        return len(self._running) + len(self._queued) + len(self._held)

    def room(self) -> bool:
        """Whether another prepared item may be submitted without going deeper than the calls
        allowed plus one waiting behind them."""
        return self._pending() <= self._allowed()

    def calls_room(self) -> int:
        """How many more calls may be submitted now (as :meth:`room` counts them)."""
        return max(0, self._allowed() + 1 - self._pending())

    def calls_free(self) -> int:
        """How many more calls could start now, none waiting behind the others."""
        return max(0, self._allowed() - self._pending())

    def paused(self, taken: Mapping[str, int] | None = None) -> frozenset[str]:
        """Lanes at their hold, counting ``taken`` (items of theirs the preparer holds): the
        preparer leaves them alone until their jobs leave."""
        return frozenset(
            lane for lane in {*self.lanes, *(taken or ())}
            if len(self.lanes.get(lane) or ()) + (taken or {}).get(lane, 0) >= self.hold
        )  # fmt: skip

    def submit(self, lane: str, prepared: Any) -> Job:
        """Give ``prepared`` (an item of ``lane``) to a thread, or mark it ready when it is
        light and the node finishes those without a call."""
        job = Job(lane, prepared)
        self.lanes.setdefault(lane, deque()).append(job)
        if self.light_path and getattr(prepared, "light", False):
            job.state, job.result = DONE, prepared
            _wake(self._for_collector)
            return job
        self._held.append(job)
        self._dispatch()
        return job

    def _dispatch(self) -> None:
        """Give waiting calls to the threads: each to a free one while fewer run than allowed;
        one more, queued behind them, when all the threads run (it starts the moment one ends,
        without waiting for the event loop to hear of it)."""
        allowed = self._allowed()
        # A call queued behind the others starts on whichever thread frees first, beside the
        # others still running: not for a node that says another call may not start at once.
        behind = allowed == self.instances and self.calls.ready is None
        while self._held and not self._queued:
            running = len(self._running)
            if running >= allowed and not (behind and running == self.instances):
                return
            if 0 < running < allowed and not self.calls.another():
                # A second call would only wait (its share of the budget used up for now): it
                # waits here, and is looked at again shortly, or when a call ends.
                if self._recheck is None:
                    self._recheck = self._loop.call_later(RECHECK_S, self._rechecked)
                return
            job = self._held.popleft()
            job.future = future = self._pool.submit(job.run, self._process, (self.name, cputime.CODE),
                                                    self._takes_lane)  # fmt: skip
            future.add_done_callback(functools.partial(self._heard, job))
            if running < allowed:
                self._start(job, _clock())
            else:
                self._queued.append(job)

    def _rechecked(self) -> None:
        self._recheck = None
        self._dispatch()

    def end(self) -> None:
        self.ended = True
        _wake(self._for_collector)

    def expected_free_ns(self) -> float:
        """How long until a thread is expected to be free for the next item (0 when one is and
        a call there would start; else when the soonest call under way ends)."""
        pending = self._pending()
        if pending < self._allowed() and (pending == 0 or self.calls.another()):
            return 0.0
        now = _clock()
        soonest = min((job.started_ns + self.process_ns - now for job in self._running), default=0.0)
        return max(0.0, soonest + self.process_ns * (len(self._queued) + len(self._held)))

    async def preparer_wait(self, others: deque[asyncio.Future[None]] | None = None,
                            timeout_ns: float | None = None) -> None:  # fmt: skip
        """Until a job leaves or a call ends (or one of ``others`` wakes: an inbox's getters),
        with ``timeout_ns``, at most that long."""
        fut = self._for_preparer = self._loop.create_future()
        if others is not None:
            others.append(fut)
        try:
            if timeout_ns is None:
                await fut
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout_ns / 1e9):
                        await fut
        finally:
            self._for_preparer = None
            if others is not None:
                with contextlib.suppress(ValueError):
                    others.remove(fut)

    # -- the collector's side -----------------------------------------------------------------

    async def next_ready(self) -> Job | None:
        """The next job to leave (the head of a lane whose outcome is in), once there is one;
        None when the preparer has ended and every job has left. Calls past their deadline are
        abandoned on the way (their jobs leave as :data:`ABANDONED`). Raises
        :class:`NodeStuck` when abandoned calls hold too many threads for too long."""
        while True:
            for jobs in self.lanes.values():
                if jobs and jobs[0].ready:
                    job = jobs.popleft()
                    _wake(self._for_preparer)  # its lane may have room again
                    return job
            if self.ended and not any(self.lanes.values()):
                return None
            wait_ns = min((j.deadline_ns for j in self._running if j.deadline_ns), default=0)
            fut = self._for_collector = self._loop.create_future()
            try:
                if not wait_ns:
                    await fut
                else:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max(0.0, (wait_ns - _clock()) / 1e9)):
                            await fut
            finally:
                self._for_collector = None
            self._expire()

    def measured(self, job: Job) -> int:
        """A finished call's time, into the running means; returns it."""
        elapsed = job.ran_ns[1] - job.ran_ns[0]
        if self.process_ns:
            self.process_spread_ns = _mean(self.process_spread_ns, abs(elapsed - self.process_ns))
        self.process_ns = _mean(self.process_ns, elapsed)
        return elapsed

    def _start(self, job: Job, at_ns: int) -> None:
        job.state = RUNNING
        job.started_ns = at_ns
        if self._timeout_ns is not None:
            job.deadline_ns = at_ns + self._timeout_ns
            _wake(self._for_collector)  # it waits until the earliest deadline: this one may be it
        self._running.append(job)
        if self._metrics is not None:
            self._metrics.in_flight = len(self._running)

    def _heard(self, job: Job, _: Future[Any]) -> None:
        """On the call's thread as it returns: the loop hears of it soon after."""
        self._loop.call_soon_threadsafe(self._ended_call, job)

    def _ended_call(self, job: Job) -> None:
        """A call's thread returned (on the loop, soon after)."""
        if job.state is ABANDONED:  # it was given up on at its deadline; its thread has left
            return
        assert job.future is not None
        if job.future.cancelled():
            return
        error = job.future.exception()
        if error is None:
            job.state, job.result = DONE, job.future.result()
        else:
            job.state, job.error = FAILED, error
        self._freed(job, max(job.ran_ns[1], job.started_ns))
        _wake(self._for_collector)

    def _freed(self, job: Job, at_ns: int) -> None:
        """``job`` no longer holds a thread: the call queued behind started on it then, and
        waiting ones go to the threads."""
        if job in self._running:
            self._running.remove(job)
            if self._queued:
                following = self._queued.popleft()
                self._start(following, max(at_ns, following.submitted_ns))
        elif job in self._queued:  # a thread took it before the loop heard of the one before
            self._queued.remove(job)
        self._dispatch()
        if self._metrics is not None:
            self._metrics.in_flight = len(self._running)
        _wake(self._for_preparer)

    def _expire(self) -> None:
        """Abandon every call past its deadline (its job leaves as :data:`ABANDONED`)."""
        now = _clock()
        for job in [j for j in self._running if j.deadline_ns and j.deadline_ns <= now]:
            assert job.future is not None
            if job.future.done():  # it ended just now: its outcome is on its way to the loop
                continue
            job.state = ABANDONED
            self.abandoned_ns = now - job.started_ns
            let_go(job)
            self._hung = [(t, f) for t, f in self._hung if not f.done()]
            self._hung.append((now, job.future))
            job.error = self._late(now)
            self._pool.retire(job.future)  # a fresh thread takes its place
            self._freed(job, now)

    def _late(self, now: int) -> Exception:
        """The error of a call abandoned at its deadline: :class:`NodeStuck` when abandoned
        calls hold as many threads as :data:`MAX_HUNG_THREADS`, or two for a minute (a stall
        that passes lets its threads return, and they are no longer counted)."""
        hung = self._hung
        oldest_s = (now - hung[0][0]) / 1e9
        if len(hung) >= MAX_HUNG_THREADS or (len(hung) >= 2 and oldest_s >= STUCK_AFTER_S):
            return NodeStuck(
                f"process() ran past timeout_s={self._timeout_s} and {len(hung)} of its threads have "
                f"not returned, the oldest for {oldest_s:.0f} s: the device or driver is stuck; restart "
                "the process",
                node_id=self.name,
            )
        return NodeTimeout(f"call took longer than timeout_s={self._timeout_s}", node_id=self.name)

    def close(self) -> None:
        """At the end of the node (or its cancellation): calls not started are dropped, running
        ones are left to finish on their own (keeping their items' leases until then), and
        outcomes nobody will collect are released."""
        for jobs in self.lanes.values():
            while jobs:
                drop(jobs.pop())
        self._held.clear()
        self._queued.clear()
        self._running.clear()
        if self._recheck is not None:
            self._recheck.cancel()
        if self._metrics is not None:
            self._metrics.in_flight = 0
        self._pool.shutdown(wait=False)


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


def _mean(mean: float, sample: float) -> float:
    return sample if mean == 0.0 else mean * 0.8 + sample * 0.2
