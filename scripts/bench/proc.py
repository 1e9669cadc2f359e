"""What the kernel says about a process and about the machine: a process's CPU seconds, RSS,
threads and open descriptors (``/proc/PID/stat``, ``status``, ``fd``, ``task``) and the
processes below it, the machine's busy seconds (``/proc/stat``) and the cores this process may
use (its affinity and the cgroup's ``cpu.max``). The parsers take a file's text, so they are
tested on made-up lines; the readers return None once the process is gone."""

from __future__ import annotations

import os
from pathlib import Path

TICKS_PER_S = float(os.sysconf("SC_CLK_TCK"))
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _stat_fields(stat_text: str) -> list[str]:
    """``/proc/PID/stat``'s fields from the third on: the name before them may hold spaces."""
    return stat_text[stat_text.rindex(")") + 2 :].split()


def proc_cpu_s(stat_text: str, ticks_per_s: float = TICKS_PER_S) -> float:
    """User + system CPU seconds, every thread, from a ``/proc/PID/stat`` line (fields 14 and 15)."""
    fields = _stat_fields(stat_text)
    return (int(fields[11]) + int(fields[12])) / ticks_per_s


def parent_pid(stat_text: str) -> int:
    """The parent's pid from a ``/proc/PID/stat`` line (field 4)."""
    return int(_stat_fields(stat_text)[1])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first (from each process's ``/proc/PID/stat``;
    one that ends meanwhile is left out)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            children.setdefault(parent_pid(stat.read_text()), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def busy_s(proc_stat_text: str, ticks_per_s: float = TICKS_PER_S) -> float:
    """Busy CPU seconds of the whole machine since boot from ``/proc/stat``: all but idle and iowait."""
    ticks = [int(v) for v in proc_stat_text.splitlines()[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / ticks_per_s


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot, every process (``/proc/stat``)."""
    return busy_s(Path("/proc/stat").read_text())


def read_proc(pid: int) -> tuple[float, float, int] | None:
    """``(cpu_s, rss_mb, threads)`` of a process from ``/proc/PID/stat``; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = _stat_fields(stat)  # 20 threads; 24 rss, in pages
    return proc_cpu_s(stat), int(fields[21]) * PAGE_BYTES / 2**20, int(fields[17])


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far; None once it is gone."""
    read = read_proc(pid)
    return None if read is None else read[0]


def footprint(pid: int) -> dict[str, float] | None:
    """RSS (MB, ``status``'s VmRSS), open descriptors, threads and CPU seconds of a process; None
    once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    cpu = cpu_s(pid)
    if cpu is None:
        return None
    return {"rss_mb": rss_kb / 1024, "fds": fds, "threads": threads, "cpu_s": cpu}


def usable_cores() -> float:
    """The cores this process may use: its affinity, capped by the cgroup's ``cpu.max`` quota."""
    cores = float(len(os.sched_getaffinity(0)))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    return cores if quota == "max" else min(cores, int(quota) / int(period))
