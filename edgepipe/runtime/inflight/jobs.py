"""The jobs of a node's calls in flight (:mod:`.flight`): one prepared item each, its call on a
thread of the node's (or none, for a light item), and what came of it."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from edgepipe.core import cputime
from edgepipe.core.lease import Leased
from edgepipe.runtime.calls import abandon

_clock = time.perf_counter_ns

QUEUED, RUNNING, DONE, FAILED, ABANDONED = "queued", "running", "done", "failed", "abandoned"


class Job:
    """One prepared item of a lane: a call on the node's threads, or a light one (no call)."""

    __slots__ = ("deadline_ns", "error", "future", "lane", "prepared", "ran_ns", "result", "started_ns",
                 "state", "submitted_ns")  # fmt: skip

    def __init__(self, lane: str, prepared: Any) -> None:
        self.lane = lane
        self.prepared = prepared
        self.future: Future[Any] | None = None
        self.state = QUEUED
        self.result: Any = None
        self.error: BaseException | None = None
        self.submitted_ns = _clock()
        self.started_ns = 0
        """When its call started, as the loop infers it: when a thread was free for it."""
        self.deadline_ns = 0
        self.ran_ns = (0, 0)
        """(start, end) of ``process()``, as its thread saw them."""

    @property
    def ready(self) -> bool:
        """Its outcome is in (a result, a failure, or abandoned at its deadline)."""
        return self.state is DONE or self.state is FAILED or self.state is ABANDONED

    def run(self, process: Callable[..., Any], key: tuple[str, str], lane: bool) -> Any:
        """On a thread of the node's; its CPU counted under ``key`` (the node's ``code``)."""
        t0 = _clock()
        cputime.begin(key)
        try:
            return process(self.prepared, self.lane) if lane else process(self.prepared)
        finally:
            cputime.end()
            self.ran_ns = (t0, _clock())


def let_go(job: Job) -> None:
    """Leave a running call to its thread: its item stays leased to the thread until it
    returns (and a late pooled result is released then); our own reference goes now."""
    assert job.future is not None
    abandon(job.future, job.prepared)
    if isinstance(job.prepared, Leased):
        job.prepared.release()


def drop(job: Job) -> None:
    """A job nobody will collect: its item, and a pooled result, go back."""
    if job.state is ABANDONED:
        return  # let go already
    future = job.future
    result = job.result
    if future is not None:
        if not future.done() and not future.cancel():
            let_go(job)  # running: its thread keeps the item until it returns
            return
        ok = future.done() and not future.cancelled() and future.exception() is None
        result = future.result() if ok else None
    if result is not None and result is not job.prepared and isinstance(result, Leased):
        result.release()
    if isinstance(job.prepared, Leased):
        job.prepared.release()
