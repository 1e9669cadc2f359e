"""scripts/bench/proc.py: /proc read for a process's CPU, memory and threads, and the machine's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from scripts.bench.proc import (
    busy_s,
    cpu_s,
    descendants,
    footprint,
    parent_pid,
    proc_cpu_s,
    read_proc,
    usable_cores,
)


def test_proc_stat_fields_are_counted_after_the_name() -> None:
    # A thread name may hold spaces and parentheses: fields are counted from the last ')'.
    line = "4242 (python (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 9 0 77 0 0"
    assert proc_cpu_s(line, 100) == 3.0  # utime 250 + stime 50 ticks
    stat = "cpu  100 20 30 400 50 0 10 40 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
    assert busy_s(stat, 100) == 2.0  # all but idle (400) and iowait (50): 200 ticks
    assert parent_pid(line) == 1


def test_proc_stat_gives_cpu_rss_and_threads_of_a_process() -> None:
    cpu, rss_mb, threads = read_proc(os.getpid()) or (0.0, 0.0, 0)
    assert cpu > 0
    assert rss_mb > 10
    assert threads >= 1
    assert read_proc(2**22 + 1) is None  # past pid_max: no such process
    assert cpu_s(2**22 + 1) is None


def test_the_footprint_counts_descriptors_and_threads() -> None:
    here = footprint(os.getpid()) or {}
    assert here["rss_mb"] > 10
    assert here["fds"] >= 3  # stdin, stdout, stderr at least
    assert here["threads"] >= 1
    assert here["cpu_s"] > 0
    assert footprint(2**22 + 1) is None


def test_usable_cores_are_at_most_the_affinity() -> None:
    assert 0 < usable_cores() <= len(os.sched_getaffinity(0))


def test_descendants_are_the_children_and_theirs() -> None:
    # a shell that starts a Python that starts a sleep: both are below the shell, nothing else
    code = "import subprocess, sys; p = subprocess.Popen(['sleep', '30']); print(p.pid, flush=True); p.wait()"
    with subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "{code}"; exit 0'], stdout=subprocess.PIPE,
                          text=True) as shell:  # fmt: skip
        assert shell.stdout is not None
        sleep_pid = int(shell.stdout.readline())
        try:
            below = descendants(shell.pid)
            assert below[-1] == sleep_pid
            assert len(below) == 2
            assert descendants(sleep_pid) == []
        finally:
            os.kill(sleep_pid, signal.SIGKILL)
