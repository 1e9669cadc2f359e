"""Running ``edgepipe run`` in a subprocess and timing how it ends: from the moment SIGTERM is
sent, or from its "running" line for a ``--duration`` run (what tests/test_shutdown.py shares).

The budget is the drain deadline plus one second (docs/command-line.md, `--drain-timeout`). ``SLACK_S`` is added
for the machine, not for edgepipe: CI has two cores shared with the test runner itself, and a
child process's teardown and the parent's wake-up were measured there at up to 0.3 s.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.support import cli_process

REPO = Path(__file__).resolve().parents[2]
DRAIN_S = 1.0
"""``--drain-timeout`` of every run here: short, so that a hung stage costs one second."""
SLACK_S = 0.5
BUDGET_S = DRAIN_S + 1.0 + SLACK_S
"""What a stop may take, from the signal to the exit."""


@dataclass(frozen=True, repr=False)
class Ended:
    code: int
    took_s: float
    """Seconds from the signal (or from the "running" line) to the exit."""
    stderr: str

    def __repr__(self) -> str:  # what a failed assertion shows
        return f"exit {self.code} after {self.took_s:.2f} s; stderr:\n{self.stderr}"


def start(args: list[str], cwd: Path = REPO, stdout: int | IO[bytes] = subprocess.DEVNULL) -> Run:
    """``edgepipe run ARGS --drain-timeout 1``, once it has logged that it is running."""
    return Run(cli_process.start("run", *args, "--drain-timeout", str(DRAIN_S), cwd=cwd, stdout=stdout))


class Run:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.head: list[str] = []
        assert proc.stderr is not None
        self.wait_for("edgepipe: running '")  # after the imports and the checks: the run begins
        self.running_t = time.monotonic()

    def wait_for(self, text: str) -> str:
        """The first line of stderr (from here on) that holds ``text``."""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.head.append(line)
            if text in line:
                return line
        self.ended(0)
        raise AssertionError(f"no {text!r} in its output:\n{''.join(self.head)}")

    def stop(self, after_s: float = 1.0, before: Callable[[], None] | None = None) -> Ended:
        """SIGTERM ``after_s`` after the run began (``before`` it, if given); how it ended."""
        time.sleep(after_s)
        if before is not None:
            before()
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        return self.ended(t0)

    def ended(self, t0: float | None = None, timeout_s: float = 20.0) -> Ended:
        """Wait for the exit (killed past ``timeout_s``): timed from ``t0``, else from the
        "running" line."""
        start_t = self.running_t if t0 is None else t0
        try:
            _, err = self.proc.communicate(timeout=timeout_s)
            took_s = time.monotonic() - start_t
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
            took_s = float("inf")
        return Ended(self.proc.returncode, took_s, "".join(self.head) + (err or ""))
