"""The CPU ledger: where every CPU-second of the process goes, per node and kind of work.

Sampled by the scheduler about once a second (:meth:`CpuLedger.sample`, on the event loop: it
reads one small file per thread, a fraction of a millisecond for dozens of threads). Three
sources, combined so that no CPU-second is counted twice:

1. **Counted calls** (:mod:`edgepipe.core.cputime`): the CPU of each call a worker thread makes
   for a node (``code``, ``pre``), of each heavy call admitted by the gate (``model``,
   ``tokens``, ``encode``) and of each start/stop hook (``setup``), exclusive of the calls
   counted inside it.
2. **Threads' own clocks** (``/proc/self/task/<tid>/stat``: name, user + system time): what a
   thread spent outside counted calls goes to the tag it is named or claimed with
   (:mod:`edgepipe.core.threadname`: a decode thread and FFmpeg's threads → ``decode``; ONNX
   Runtime's intra-op threads → the model's kind), to ``runtime`` for the event loop's thread,
   and to nothing otherwise.
   A codec's threads end with it (a looped file reopens its decoder every few seconds): their
   time since the last sample is noted as the codec closes (:func:`~edgepipe.core.threadname.ending`).
3. **The process's clock** (``time.process_time_ns``: every thread, ended ones included): what
   1 and 2 leave of it is ``overhead`` (idle workers, threads nobody named, other threads' last
   moments before they ended). Never negative.

Totals count from the ledger's creation; rates (cores) are over the last window between two
samples. A thread's remainder is counted by its high-water mark, so that a call counted late
(a model run that ends after the sample that saw its CPU as the thread's) is not counted twice.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from edgepipe.core import cputime, threadname
from edgepipe.core.cputime import CODE, KINDS, MODEL, OVERHEAD, PRE, RUNTIME, heavy_key
from edgepipe.core.threadname import TICKS_PER_S, read_stat
from edgepipe.sched.gate import Ticket

ENDING_WAIT_SAMPLES = 10
"""A thread noted as ending that is still there after this many samples is read as any other."""

Key = tuple[str, str]
"""``(node_id, kind)``; ``node_id`` is "" for the runtime and overhead."""


@dataclass(frozen=True, slots=True)
class TaskCpu:
    """One thread of the process as ``/proc`` shows it."""

    tid: int
    name: str
    cpu_ns: int
    """User + system time so far (the kernel's clock ticks, 10 ms, in nanoseconds)."""


def read_tasks(task_dir: str = threadname.TASK_DIR, ticks_per_s: int = TICKS_PER_S) -> list[TaskCpu]:
    """Every thread of the process with its CPU time (threads that end meanwhile are left out)."""
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return []
    tasks = []
    for tid in tids:
        try:
            name, cpu_ns = read_stat(tid, task_dir, ticks_per_s)
        except (OSError, ValueError):
            continue
        tasks.append(TaskCpu(int(tid), name, cpu_ns))
    return tasks


@dataclass(frozen=True, slots=True)
class _Sample:
    t: float
    process_ns: int
    by_key: dict[Key, int]
    """Attributed ns by key, overhead included, since the ledger began."""
    items: dict[str, tuple[int, float]]
    """Per node: items handled and busy (wall) seconds so far."""


class CpuLedger:
    """See the module docstring. ``sample`` and ``snapshot`` from one thread (the event loop)."""

    def __init__(
        self,
        *,
        runtime_tid: int | None = None,
        window_s: float = 1.0,
        task_dir: str = threadname.TASK_DIR,
        tasks: Callable[[], list[TaskCpu]] | None = None,
        process_ns: Callable[[], int] = time.process_time_ns,
        clock: Callable[[], float] = time.monotonic,
        counts: Callable[[Collection[int]], tuple[dict[Key, int], list[cputime.Account]]] = cputime.collect,
        claims: Callable[[], Mapping[int, threadname.Tag]] = threadname.claimed,
        endings: Callable[[], Mapping[int, tuple[threadname.Tag, int]]] = threadname.endings,
    ) -> None:
        """The clocks are the process's own unless given (tests): ``tasks`` its threads,
        ``counts`` the counted calls, given the threads seen (:func:`edgepipe.core.cputime.collect`),
        ``claims`` the threads claimed by id and ``endings`` their last CPU times
        (:func:`edgepipe.core.threadname.claimed`, :func:`~edgepipe.core.threadname.endings`)."""
        self.runtime_tid = threading.get_native_id() if runtime_tid is None else runtime_tid
        """The event loop's thread: its own time is ``runtime``."""
        self.window_s = window_s
        self._tasks = tasks if tasks is not None else lambda: read_tasks(task_dir)
        self._process_ns = process_ns
        self._clock = clock
        self._counts = counts
        self._claims = claims
        self._endings = endings
        self._ending: dict[int, tuple[threadname.Tag, int, int]] = {}
        """Threads noted as ending, until they are gone: (tag, CPU ns then, samples waited)."""
        self._last_cpu: dict[int, int] = {}
        self._high: dict[int, int] = {}
        """Per thread: the most of its time ever left outside counted calls (counted once)."""
        self._from_threads: dict[Key, int] = {}
        self.sample_ms = 0.0
        """How long the last sample took."""
        self.threads = 0
        self._figures: tuple[_Sample, dict[str, Any]] | None = None
        t0 = clock()
        self._t0 = t0
        self._base_process = process_ns()
        counted, _ = self._read(base=True)
        self._base_counted = counted
        self._samples: deque[_Sample] = deque([_Sample(t0, 0, {}, {})], maxlen=64)

    # -- sampling -----------------------------------------------------------------------------

    def sample(self, items: Mapping[str, tuple[int, float]] | None = None) -> None:
        """Read the clocks now; ``items``: per node, items handled and busy seconds so far (for
        CPU and wall time per item)."""
        t_start = time.perf_counter()
        now = self._clock()
        counted, from_threads = self._read(base=False)
        process = self._process_ns() - self._base_process
        by_key: dict[Key, int] = {}
        for key, ns in counted.items():
            ns -= self._base_counted.get(key, 0)
            if ns > 0:
                by_key[key] = ns
        for key, ns in from_threads.items():
            by_key[key] = by_key.get(key, 0) + ns
        by_key[("", OVERHEAD)] = max(0, process - sum(by_key.values()))
        self._samples.append(_Sample(now, process, by_key, dict(items or {})))
        while len(self._samples) > 2 and now - self._samples[1].t >= self.window_s - 1e-6:
            self._samples.popleft()
        self.sample_ms = (time.perf_counter() - t_start) * 1000

    def _read(self, *, base: bool) -> tuple[dict[Key, int], dict[Key, int]]:
        """Counted calls by key (cumulative), and what the threads' remainders add up to."""
        # The threads' clocks first, the counts after: a thread still listed keeps its counts
        # apart (else its whole time would look uncounted, and be counted twice), and a call
        # that ends in between makes a remainder low for a moment (made good at the next
        # sample), never high (which the high-water mark would keep).
        tasks = self._tasks()
        cpu = {t.tid: t.cpu_ns for t in tasks}
        ended, accounts = self._counts(cpu.keys())
        self.threads = len(tasks)
        counted = dict(ended)
        in_calls: dict[int, int] = {}
        for account in accounts:
            by_key, total = account.read(cpu.get(account.tid))
            in_calls[account.tid] = in_calls.get(account.tid, 0) + total
            for key, ns in by_key.items():
                counted[key] = counted.get(key, 0) + ns
        claimed = self._claims()
        for task in tasks:
            if task.cpu_ns < self._last_cpu.get(task.tid, 0):  # an id reused by a new thread
                self._high.pop(task.tid, None)
            self._last_cpu[task.tid] = task.cpu_ns
            rest = task.cpu_ns - in_calls.get(task.tid, 0)
            high = self._high.get(task.tid, 0)
            if rest <= high:
                continue
            self._high[task.tid] = rest
            if base:  # time before the ledger began is nobody's here
                continue
            owner = self._owner(task, claimed)
            if owner is not None:
                self._from_threads[owner] = self._from_threads.get(owner, 0) + rest - high
        self._count_ended(cpu, base)
        gone = self._last_cpu.keys() - cpu.keys()
        for tid in gone:
            del self._last_cpu[tid]
            self._high.pop(tid, None)
        return counted, dict(self._from_threads)

    def _count_ended(self, cpu: Mapping[int, int], base: bool) -> None:
        """Threads that ended since the last sample, noted as they were ending (a codec's, at its
        close): their time since then, which ``/proc`` no longer shows."""
        for tid, (tag, cpu_ns) in self._endings().items():
            self._ending[tid] = (tag, cpu_ns, 0)
        for tid, (tag, cpu_ns, waited) in list(self._ending.items()):
            if tid in cpu:  # not gone yet: read as any thread until it is
                if waited < ENDING_WAIT_SAMPLES:
                    self._ending[tid] = (tag, cpu_ns, waited + 1)
                else:
                    del self._ending[tid]
                continue
            del self._ending[tid]
            high = self._high.get(tid, 0)
            if cpu_ns > high and not base:
                key = tag.key()
                self._from_threads[key] = self._from_threads.get(key, 0) + cpu_ns - high

    def _owner(self, task: TaskCpu, claimed: Mapping[int, threadname.Tag]) -> Key | None:
        tag = claimed.get(task.tid) or threadname.tag_named(task.name)
        if tag is not None:
            return tag.key()
        if task.tid == self.runtime_tid:
            return ("", RUNTIME)
        return None

    # -- figures ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Plain data: totals since the ledger began (seconds) and the last window (cores), by
        kind and per node, with each node's CPU and wall time per item. The same object until
        the next sample: do not change it."""
        last = self._samples[-1]
        if self._figures is None or self._figures[0] is not last:
            self._figures = (last, self._figures_now())
        return self._figures[1]

    def _figures_now(self) -> dict[str, Any]:
        last, first = self._samples[-1], self._samples[0]
        dt = last.t - first.t
        elapsed = last.t - self._t0
        total = _by_kind_and_node(last.by_key)
        before = _by_kind_and_node(first.by_key)
        window: dict[str, dict[str, float]] = {}
        for node, kinds in total.items():
            for kind, ns in kinds.items():
                cores = max(0.0, (ns - before.get(node, {}).get(kind, 0)) / 1e9 / dt) if dt > 0 else 0.0
                window.setdefault(node, {})[kind] = round(cores, 4)
        kinds_s: dict[str, float] = {}
        kinds_cores: dict[str, float] = {}
        for node, kinds in total.items():
            for kind, ns in kinds.items():
                kinds_s[kind] = kinds_s.get(kind, 0.0) + ns / 1e9
                kinds_cores[kind] = kinds_cores.get(kind, 0.0) + window[node][kind]
        nodes = {}
        order = {node: i for i, node in enumerate(last.items)}  # the graph's order, then the rest
        for node, kinds in sorted(total.items(), key=lambda nk: order.get(nk[0], len(order))):
            if not node:
                continue
            nodes[node] = {
                "kinds_s": {k: round(ns / 1e9, 4) for k, ns in _ordered(kinds)},
                "kinds_cores": dict(_ordered(window[node])),
                **_per_item(node, kinds, before.get(node, {}), last.items, first.items),
            }
        return {
            "elapsed_s": round(elapsed, 3),
            "window_s": round(dt, 3),
            "process_s": round(last.process_ns / 1e9, 4),
            "process_cores": round((last.process_ns - first.process_ns) / 1e9 / dt, 4) if dt > 0 else 0.0,
            "kinds_s": {k: round(v, 4) for k, v in _ordered(kinds_s)},
            "kinds_cores": {k: round(v, 4) for k, v in _ordered(kinds_cores)},
            "nodes": nodes,
            "threads": self.threads,
            "sample_ms": round(self.sample_ms, 3),
        }


def _by_kind_and_node(by_key: Mapping[Key, int]) -> dict[str, dict[str, int]]:
    """Node -> kind -> ns; a model node's own code is ``pre``, other nodes' ``code``."""
    nodes: dict[str, dict[str, int]] = {}
    for (node, kind), ns in by_key.items():
        nodes.setdefault(node, {})[kind] = nodes.get(node, {}).get(kind, 0) + ns
    for kinds in nodes.values():
        if MODEL in kinds and CODE in kinds:
            kinds[PRE] = kinds.get(PRE, 0) + kinds.pop(CODE)
    return nodes


def _ordered(values: Mapping[str, Any]) -> list[tuple[str, Any]]:
    order = {k: i for i, k in enumerate(KINDS)}
    return sorted(values.items(), key=lambda kv: order.get(kv[0], len(order)))


def _per_item(
    node: str,
    kinds: Mapping[str, int],
    kinds_before: Mapping[str, int],
    items: Mapping[str, tuple[int, float]],
    items_before: Mapping[str, tuple[int, float]],
) -> dict[str, float | int | None]:
    """CPU and wall milliseconds per item, over the run and over the window; set-up (loading
    a model) is not per item."""
    cpu_ns = sum(ns for kind, ns in kinds.items() if kind != cputime.SETUP)
    cpu_before = sum(ns for kind, ns in kinds_before.items() if kind != cputime.SETUP)
    n, busy_s = items.get(node, (0, 0.0))
    n0, busy0_s = items_before.get(node, (0, 0.0))

    def per(value_ms: float, count: int) -> float | None:
        return round(value_ms / count, 3) if count > 0 else None

    counted = cpu_ns > 0  # else code on the event loop (async, inline): its CPU is the runtime's
    return {
        "items": n,
        "cpu_ms_per_item": per((cpu_ns - cpu_before) / 1e6, n - n0) if counted else None,
        "wall_ms_per_item": per((busy_s - busy0_s) * 1000, n - n0) if busy_s else None,
        "run_cpu_ms_per_item": per(cpu_ns / 1e6, n) if counted else None,
        "run_wall_ms_per_item": per(busy_s * 1000, n) if busy_s else None,
    }


def ticket_tag(ticket: Ticket) -> threadname.Tag:
    """A thread tag for the native threads of ``ticket``'s heavy work (a session's intra-op
    threads, an encoder's): it follows the ticket's owner and kind, which the node using it sets
    after they exist. Keep it as long as the threads live."""
    ref = weakref.ref(ticket)

    def follow() -> tuple[str, str] | None:
        now = ref()
        return None if now is None else heavy_key(now.owner, now.kind)

    return threadname.Tag(*heavy_key(ticket.owner, ticket.kind), follow=follow)
