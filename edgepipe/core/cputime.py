"""CPU time of calls, counted per ``(node_id, kind)`` on the thread that makes them.

A worker thread serves many nodes, one call at a time, so its CPU clock alone cannot say whose
its time was. Each call that does a node's work is counted instead: :func:`counted` (or
:func:`begin`/:func:`end`) reads the calling thread's CPU clock (``time.thread_time_ns``, the
same clock as ``/proc/self/task/<tid>/stat``) before and after. Counts nest and are exclusive:
a model run counted as ``model`` inside a detector's call counted as ``code`` is subtracted
from the call, so that the ``code`` left is the detector's own work (pre-processing, boxes).

Each thread keeps its own counts (:class:`Account`), written by that thread alone. Another
thread (the CPU ledger, :mod:`edgepipe.sched.ledger`) reads them with :meth:`Account.read`,
calls still running included up to a CPU time it gives, so that a long call shows as it runs.

Kinds of work (:data:`KINDS`): what the ledger groups CPU by.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any, TypeVar

R = TypeVar("R")

DECODE = "decode"
"""A source's decode thread and the codec's own threads."""
PRE = "pre"
"""A model node's own code around its runs: pre-processing, reading boxes, tracking."""
MODEL = "model"
"""Model runs (ONNX Runtime's calling thread and its intra-op threads)."""
TOKENS = "tokens"
"""A language model's token steps (its worker thread and the model's threads)."""
ENCODE = "encode"
"""Video encodes (the encoder's calling thread and its threads)."""
CODE = "code"
"""A node's own code on worker threads (not a model node's: see :data:`PRE`)."""
SETUP = "setup"
"""A node's ``start()``/``stop()`` hooks: loading models, opening inputs."""
RUNTIME = "runtime"
"""The event loop's thread: the runtime itself and the code that runs on it (async nodes)."""
OVERHEAD = "overhead"
"""What nothing above accounts for: idle workers, threads that could not be attributed."""
KINDS = (DECODE, PRE, MODEL, TOKENS, ENCODE, CODE, SETUP, RUNTIME, OVERHEAD)

HEAVY_KINDS = {"detect": MODEL, "model": MODEL, "lm": TOKENS, "encode": ENCODE}
"""The CPU gate's kinds of heavy call (:class:`~edgepipe.sched.gate.Ticket`) as kinds of work."""

_clock = time.thread_time_ns


def heavy_key(owner: str, gate_kind: str) -> tuple[str, str]:
    """The key a heavy call of ``gate_kind`` (``detect``, ``lm`` …) for ``owner`` counts under."""
    return owner, HEAVY_KINDS.get(gate_kind, MODEL)


class Account:
    """One thread's counts. Written by its thread only; :meth:`read` from any."""

    __slots__ = ("done", "stack", "thread", "tid", "version")

    def __init__(self) -> None:
        self.thread = threading.current_thread()
        self.tid = threading.get_native_id()
        self.done: dict[tuple[str, str], int] = {}
        """Nanoseconds of finished calls, exclusive of the calls counted inside them."""
        self.stack: list[list[Any]] = []
        """Calls running, outermost first: ``[key, cpu_ns at start, ns of finished inner calls]``."""
        self.version = 0
        """Odd while the thread changes the counts (a reader tries again)."""

    def read(self, now_ns: int | None) -> tuple[dict[tuple[str, str], int], int]:
        """``(ns by key, their sum)``: finished calls, and the calls running counted up to
        ``now_ns``, the thread's CPU time read meanwhile (None: finished calls only)."""
        for _ in range(100):
            v = self.version
            if v & 1:
                time.sleep(0)  # the thread is between two writes: let it finish them
                continue
            stack = [tuple(frame) for frame in self.stack]
            done = dict(self.done)
            if self.version == v:
                break
        else:  # never caught still (a thread counting without pause): the finished calls will do
            stack, done = [], dict(self.done)
        if now_ns is not None:
            for i, (key, start_ns, inner_ns) in enumerate(stack):
                end_ns = stack[i + 1][1] if i + 1 < len(stack) else now_ns
                running = end_ns - start_ns - inner_ns
                if running > 0:
                    done[key] = done.get(key, 0) + running
        return done, sum(done.values())


_lock = threading.Lock()
_accounts: list[Account] = []
_retired: dict[tuple[str, str], int] = {}
"""Counts of threads that have ended."""


class _Local(threading.local):
    account: Account | None = None


_local = _Local()


SWEEP_AT = 64
"""Accounts kept before those of ended threads are folded away as a new one comes (without a
CPU ledger reading them, a process that runs for months must not keep one per thread it ever
had)."""


def _account() -> Account:
    account = _local.account
    if account is None:
        account = _local.account = Account()
        with _lock:
            if len(_accounts) >= SWEEP_AT:
                _retire(lambda a: not os.path.exists(f"/proc/self/task/{a.tid}"))
            _accounts.append(account)
    return account


def _retire(gone: Callable[[Account], bool]) -> None:
    """Fold the accounts of threads that have ended, and that ``gone`` says are gone, into the
    total. Under ``_lock``."""
    for account in [a for a in _accounts if not a.thread.is_alive() and gone(a)]:
        _accounts.remove(account)
        for key, ns in account.done.items():
            _retired[key] = _retired.get(key, 0) + ns


def begin(key: tuple[str, str]) -> None:
    """Start counting the calling thread's CPU under ``key`` (until :func:`end`)."""
    account = _local.account or _account()
    account.version += 1
    account.stack.append([key, _clock(), 0])
    account.version += 1


def end() -> None:
    """Stop the count :func:`begin` started last on this thread."""
    now = _clock()
    account = _local.account
    if account is None or not account.stack:
        return
    account.version += 1
    key, start_ns, inner_ns = account.stack.pop()
    elapsed = now - start_ns
    done = account.done
    done[key] = done.get(key, 0) + elapsed - inner_ns
    if account.stack:
        account.stack[-1][2] += elapsed
    account.version += 1


@contextlib.contextmanager
def counted(key: tuple[str, str]) -> Iterator[None]:
    """The block's CPU on this thread counted under ``key``."""
    begin(key)
    try:
        yield
    finally:
        end()


def run_counted(key: tuple[str, str], fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` with its CPU counted under ``key`` (give this to an executor)."""
    begin(key)
    try:
        return fn(*args)
    finally:
        end()


def own_total_ns() -> int:
    """The calling thread's counted nanoseconds so far (finished calls)."""
    account = _local.account
    return sum(account.done.values()) if account is not None else 0


def collect(running: Collection[int] = ()) -> tuple[dict[tuple[str, str], int], list[Account]]:
    """``(ended, accounts)``: the counts of threads that have ended, folded into one total
    (ns by key; it only grows), and the accounts of the others, read with :meth:`Account.read`.
    A thread is in one or the other, never both. ``running``: the ids of the OS threads seen
    running (``/proc``): a thread whose Python side has ended but whose OS thread is still
    there keeps its account a little longer, so that its time is not taken for uncounted."""
    with _lock:
        _retire(lambda a: a.tid not in running)
        return dict(_retired), list(_accounts)
