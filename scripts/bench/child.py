"""The processes a benchmark measures: their command lines (``edgepipe run`` of a pipeline file,
or a module of these scripts), the environment they inherit, how long past its duration one may
run (:data:`EXIT_GRACE_S`) and a clean stop (SIGINT, then a kill)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXIT_GRACE_S = 60.0
"""How long a child may take beyond its duration (start-up, drain, shutdown) before it is killed."""


def edgepipe_run(pipeline: Path, *args: str) -> list[str]:
    """``python -m edgepipe run PIPELINE ARGS``: the PID measured is the pipeline's own."""
    return [sys.executable, "-m", "edgepipe", "run", str(pipeline), *args]


def module(name: str, *args: str) -> list[str]:
    """``python -m NAME ARGS`` for a module of these scripts (``scripts.bench.webrtc.viewers``)."""
    return [sys.executable, "-m", name, *args]


def environ(**extra: str) -> dict[str, str]:
    """This process's environment for a child, with UTF-8 on its standard streams (the ``--stats``
    table's rule characters) and the checkout on its path (for :func:`module`), plus ``extra``."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": path, **extra}


def kill_if_overdue(proc: subprocess.Popen[Any], started: float, seconds: float, label: str) -> bool:
    """Kill ``proc`` once it has run :data:`EXIT_GRACE_S` past its ``seconds`` from ``started``
    (``time.monotonic()``), saying so: whether it did."""
    if time.monotonic() - started <= seconds + EXIT_GRACE_S:
        return False
    print(f"{label}: running {EXIT_GRACE_S:g} s past its duration: killed", file=sys.stderr)
    proc.kill()
    return True


def stop(proc: subprocess.Popen[Any], label: str) -> None:
    """A clean stop: SIGINT (``edgepipe run`` drains, a server closes), a kill after
    :data:`EXIT_GRACE_S`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        print(f"{label}: still running {EXIT_GRACE_S:g} s after SIGINT: killed", file=sys.stderr)
        proc.kill()
        proc.wait()
