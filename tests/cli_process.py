"""The ``edgepipe`` command in a child process, as a user runs it: the suite's one way to do it.

The child is this interpreter with ``-m edgepipe``, so it imports the same ``edgepipe`` as the
tests (``PYTHONPATH``) and inherits the suite's environment (the private model cache of
``tests/conftest.py``, the loopback-only ICE): ``env`` here is added to that environment, never
put in its place. Arguments may be paths; they are passed as strings. Every test that uses this
starts a process (a second or more on CI's two cores): mark it ``slow``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EDGEPIPE = (sys.executable, "-m", "edgepipe")


def command(*args: str | Path) -> list[str]:
    """``edgepipe ARGS`` as an argument list."""
    return [*EDGEPIPE, *map(str, args)]


def environment(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """This process's environment with ``env`` added (``None``: inherit it as it is)."""
    return None if env is None else {**os.environ, **env}


def edgepipe(
    *args: str | Path,
    cwd: Path = REPO,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120,
    **popen: Any,
) -> subprocess.CompletedProcess[str]:
    """``edgepipe ARGS`` run to its exit, stdout and stderr captured as text (``popen`` may send
    either elsewhere). Killed, and ``subprocess.TimeoutExpired`` raised, past ``timeout_s``."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(
        command(*args), cwd=cwd, env=environment(env), text=True, timeout=timeout_s, **popen
    )


def start(
    *args: str | Path, cwd: Path = REPO, env: Mapping[str, str] | None = None, text: bool = True, **popen: Any
) -> subprocess.Popen[Any]:
    """``edgepipe ARGS`` started, not waited for: the caller owns the process (a ``with`` block,
    or wait for it, or kill it). stdout and stderr are pipes unless ``popen`` says otherwise."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(command(*args), cwd=cwd, env=environment(env), text=text, **popen)


async def start_async(
    *args: str | Path, cwd: Path = REPO, env: Mapping[str, str] | None = None
) -> asyncio.subprocess.Process:
    """:func:`start` for a test on an event loop: stdout dropped, stderr a pipe (bytes)."""
    return await asyncio.create_subprocess_exec(
        *command(*args), cwd=cwd, env=environment(env),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
