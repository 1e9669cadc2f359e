"""Thread pools for blocking work, one per named resource (``cpu``, ``vdec``, ``npu`` ...).

Why not ``concurrent.futures.ThreadPoolExecutor``: the interpreter joins its threads at exit, so
one hung driver call (a camera that never answers) would hang the process forever after the
pipeline gave up on it. These workers are daemon threads: a call abandoned at its deadline keeps
its thread until it returns, but never keeps the process alive.

Each worker thread runs in a copy of a context (``contextvars``): the one the pool was given (a
run's pools); else that of the call that started the thread when it works for a run; else the one
the pool was made in. A pool a node's code makes in its constructor, before any run, thus works
for the run that uses it (:mod:`edgepipe.core.scope`: its gate, budget and memory plan), without a
copy of the context per call.

The work queue has no fixed bound because its callers bound it: each node has at most its
``instances`` calls in flight, plus one queued behind them (it awaits results before taking more
items), so a pool never holds more calls than its nodes allow.

A call abandoned at its deadline keeps its thread; :meth:`DaemonThreadPool.retire` lets that
thread leave the pool when it returns and starts a fresh one in its place now, so a pool of N
threads keeps N working while a stuck call hangs.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

from edgepipe.core.errors import ExitCalled
from edgepipe.core.scope import current_scope
from edgepipe.core.threadname import Tag, name_thread, thread_ending

P = ParamSpec("P")
R = TypeVar("R")

_STOP = object()


class DaemonThreadPool(Executor):
    """A fixed-size pool of daemon worker threads, started on first use."""

    def __init__(
        self,
        max_workers: int,
        name: str,
        spare_workers: int = 8,
        *,
        tag: Tag | None = None,
        context: contextvars.Context | None = None,
    ) -> None:
        """``tag``: the OS name of its threads, saying whose work they do (the CPU ledger's
        :mod:`~edgepipe.core.threadname`); None: they keep the name they were started with.
        ``context``: what its threads run in (default: the context of the call that starts a
        thread if it works for a run, else the one the pool is made in)."""
        if max_workers < 1:
            raise ValueError(f"resource '{name}': max_workers must be at least 1")
        self.max_workers = max_workers
        self.name = name
        self.spare_workers = spare_workers
        """Extra threads started only while every thread is busy with work queued: an abandoned
        call (past its deadline) must not make the next calls wait behind it."""
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._retiring: set[Future[Any]] = set()
        """Calls abandoned at their deadline: their threads leave the pool when they return."""
        self._idle = 0
        self._lock = threading.Lock()
        self._shutdown = False
        self.tag = tag
        self._context = context
        self._made_in = contextvars.copy_context() if context is None else context

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        future: Future[R] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"resource '{self.name}' is shut down")
            self._work.put((future, fn, args, kwargs))
            busy = self._idle == 0
            working = len(self._threads) - len(self._retiring)
            if working < self.max_workers or (busy and working < self.max_workers + self.spare_workers):
                self._start_thread()
        return future

    def _start_thread(self) -> None:
        """One more worker (the lock held)."""
        # A context is entered by one thread at a time: each thread gets its own copy.
        context = self._thread_context()
        thread = threading.Thread(
            target=context.run,
            args=(self._worker,),
            name=f"edgepipe-{self.name}-{len(self._threads)}",
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()

    def retire(self, future: Future[Any]) -> None:
        """The call behind ``future`` was abandoned (it runs past its deadline): its thread
        leaves the pool once the call returns, and a fresh thread takes its place at once when
        work is waiting (else with the next call). Nothing happens if the call has ended."""
        with self._lock:
            if future.done() or self._shutdown:
                return
            self._retiring.add(future)
            if not self._work.empty() and self._idle == 0:
                self._start_thread()

    def _thread_context(self) -> contextvars.Context:
        if self._context is None and current_scope() is not None:
            return contextvars.copy_context()
        return self._made_in.copy()

    def _worker(self) -> None:
        if self.tag is not None:
            name_thread(self.tag)
        while True:
            with self._lock:
                self._idle += 1
            job = self._work.get()
            with self._lock:
                self._idle -= 1
            if job is _STOP:
                thread_ending()  # a tagged thread's last moments are its tag's (the CPU ledger)
                return
            future, fn, args, kwargs = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except SystemExit as exc:  # out of a worker, it would end the whole process
                future.set_exception(ExitCalled(exc))
            except BaseException as exc:  # handed to the awaiting node, which applies its policy
                future.set_exception(exc)
            else:
                future.set_result(result)
            if self._retiring and self._leave(future):
                thread_ending()
                return

    def _leave(self, future: Future[Any]) -> bool:
        """Whether this thread's call was abandoned: then it leaves the pool (a fresh one took
        its place)."""
        with self._lock:
            if future not in self._retiring:
                return False
            self._retiring.discard(future)
            self._threads.remove(threading.current_thread())
            return True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        job = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if job is not _STOP:
                        job[0].cancel()
            for _ in self._threads:
                self._work.put(_STOP)
        if wait:
            for thread in self._threads:
                thread.join()


class Resources:
    """The executors of one run, created on first use and shut down together.

    ``workers`` sizes each pool; a resource not named there gets as many threads as the CPU has
    cores (the runtime names every resource its nodes use, sized so that no node waits for
    another's thread).
    """

    def __init__(
        self, workers: dict[str, int] | None = None, *, context: contextvars.Context | None = None
    ) -> None:
        """``context``: what the pools' threads run in (default: the caller's, as it is now)."""
        self._workers = dict(workers or {})
        self._pools: dict[str, DaemonThreadPool] = {}
        self._context = context if context is not None else contextvars.copy_context()

    def executor(self, name: str) -> DaemonThreadPool:
        pool = self._pools.get(name)
        if pool is None:
            workers = self._workers.get(name) or os.cpu_count() or 1
            pool = DaemonThreadPool(workers, name, context=self._context)
            self._pools[name] = pool
        return pool

    def workers(self, name: str) -> int:
        return self.executor(name).max_workers

    def shutdown(self) -> None:
        """Stop taking work. Never waits for a call that is still running (it was abandoned)."""
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
