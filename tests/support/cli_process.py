"""The ``edgepipe`` command in a child process, as a user runs it: the suite's one way to do it.

The child is this interpreter with ``-m edgepipe``, so it imports the same ``edgepipe`` as the
tests (``PYTHONPATH``) and inherits the suite's environment (the private model cache of
``tests/conftest.py``, the loopback-only ICE): ``env`` here is added to that environment, never
put in its place. Arguments may be paths; they are passed as strings. Every test that uses this
starts a process (a second or more on CI's two cores): mark it ``slow``. A command that starts
nothing (``plan``, ``check-ops``) can be run by :func:`in_process` instead, in milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[2]
EDGEPIPE = (sys.executable, "-m", "edgepipe")
CHECKOUT = "checkout"
"""The xdist group of the tests that watch the checkout for writes or write into it themselves
(the README's commands, a reader's outputs, ruff's and mypy's caches): one worker runs them one
after the other, so none sees another's files (``scripts/test.sh`` runs ``--dist loadgroup``)."""
Command = Callable[..., subprocess.CompletedProcess[str]]
"""A command of ``edgepipe`` with its first words given: the rest of its arguments in, how it ended out."""


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


def in_process(
    capsys: pytest.CaptureFixture[str],
    *args: str | Path,
    cwd: Path = REPO,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``edgepipe ARGS`` run by ``main`` in this process, from ``cwd`` (the repository's folder
    unless given: a command that may write there, such as ``trace``, gets a test's own folder), ``env``
    added to the environment while it runs, and returned as :func:`edgepipe` returns it
    (argparse's refusals and ``--help`` are exits too): the same parser, output and exit codes
    without an interpreter's start-up (~0.5 s a call). For commands that start no run, no
    thread and no signal handling of their own, and print what they say (log lines go to the
    test's log capture, not to ``stderr`` here)."""
    from edgepipe.cli.main import main

    capsys.readouterr()
    with contextlib.chdir(cwd), mock.patch.dict(os.environ, env or {}):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:
            code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(command(*args), code, out, err)
