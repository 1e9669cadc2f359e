"""Which node, and which kind of work, an OS thread works for: thread names and thread ids.

FFmpeg's and ONNX Runtime's threads are native: Python never sees them, so per-call clocks
cannot count them. The kernel's per-thread CPU clocks (``/proc/self/task/*/stat``) do, and two
things there say whose a thread is:

- **Its name** (``comm``, 15 bytes). A thread is named with a :class:`Tag` (``ep3:cam0``) by
  :func:`name_thread` (for its life: a source's decode thread) or :func:`named` (for a block).
  A native thread starts with the name of the thread that creates it, so ONNX Runtime's
  intra-op threads, made while their session is built on a named thread, carry its tag.
- **Its id**, for threads that rename themselves (FFmpeg 7+ calls its codec threads
  ``av:h264:df0``): :func:`native_threads` notes the threads that appear while a codec opens,
  and :func:`claimed` says whose they are.

A tag stands for ``(node_id, kind)``; the pair may follow something that changes after the
threads exist (a model's session is built before its node names itself as the owner), see
``follow``. Linux only; elsewhere names are not set and nothing is claimed (the CPU ledger
then counts such threads as overhead).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator

from edgepipe.core import cputime

COMM_BYTES = 15
"""The longest thread name the kernel keeps (16 with the terminating NUL)."""
PREFIX = "ep"
"""Tags' names start ``ep<n>:``, unique in the process."""
FOREIGN_PREFIXES = ("av:",)
"""Names that native libraries give their own threads (FFmpeg's codec threads): claimed by id
when they appear in :func:`native_threads` under a tag."""
TASK_DIR = "/proc/self/task"

_PR_SET_NAME = 15
_PR_GET_NAME = 16


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def set_thread_name(name: str) -> bool:
    """Name the calling OS thread (cut to 15 bytes); False where that cannot be done."""
    if _LIBC is None:
        return False
    raw = name.encode("utf-8", "replace")[:COMM_BYTES]
    return int(_LIBC.prctl(_PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0)) == 0


def thread_name() -> str:
    """The calling OS thread's name ("" where it cannot be read)."""
    if _LIBC is None:
        return ""
    buf = ctypes.create_string_buffer(COMM_BYTES + 1)
    if int(_LIBC.prctl(_PR_GET_NAME, buf, 0, 0, 0)) != 0:
        return ""
    return buf.value.decode("utf-8", "replace")


def comm_of(name: str) -> str:
    """``name`` as the kernel would keep it: at most 15 bytes, not cut inside a character (a
    model file's name that is not UTF-8 gives ``?`` for its bytes)."""
    return name.encode("utf-8", "replace")[:COMM_BYTES].decode("utf-8", "ignore")


class Tag:
    """A thread name standing for ``(node_id, kind)``. ``follow``, when given, is asked each
    time instead (None from it: the fixed pair), so the pair can change after threads exist."""

    __slots__ = ("__weakref__", "follow", "kind", "name", "node_id")

    def __init__(
        self, node_id: str, kind: str, follow: Callable[[], tuple[str, str] | None] | None = None
    ) -> None:
        self.node_id = node_id
        self.kind = kind
        self.follow = follow
        self.name = comm_of(f"{PREFIX}{next(_numbers)}:{node_id}")
        """The thread name (``comm``), unique in the process."""
        _TAGS[self.name] = self

    def key(self) -> tuple[str, str]:
        """``(node_id, kind)`` now."""
        if self.follow is not None:
            followed = self.follow()
            if followed is not None:
                return followed
        return self.node_id, self.kind

    def __repr__(self) -> str:
        return f"Tag({self.name!r}, {self.key()})"


_numbers = itertools.count(1)
_TAGS: weakref.WeakValueDictionary[str, Tag] = weakref.WeakValueDictionary()
"""Thread name -> its tag, while the tag lives (who made it holds it: a session, a source)."""


def tag_named(name: str) -> Tag | None:
    """The tag whose thread name is ``name`` (a ``comm`` read from ``/proc``), if any."""
    return _TAGS.get(name)


class _Local(threading.local):
    tag: Tag | None = None


_local = _Local()


def current_tag() -> Tag | None:
    """The tag the calling thread is named with (by this module), if any."""
    return _local.tag


def name_thread(tag: Tag) -> None:
    """Name the calling thread with ``tag`` for the rest of its life (or until renamed)."""
    _local.tag = tag
    set_thread_name(tag.name)


@contextlib.contextmanager
def named(tag: Tag) -> Iterator[None]:
    """The calling thread carries ``tag`` for the block: threads it creates meanwhile inherit
    it. Its own name comes back after."""
    before, before_name = _local.tag, thread_name()
    name_thread(tag)
    try:
        yield
    finally:
        _local.tag = before
        if before_name:
            set_thread_name(before_name)


_claims_lock = threading.Lock()
_claimed: dict[int, Tag] = {}


@contextlib.contextmanager
def native_threads(tag: Tag | None = None) -> Iterator[None]:
    """Around a call that starts native threads that may rename themselves (an FFmpeg codec
    opening): the calling thread carries ``tag`` (by default the one it has: nothing is done
    without one), and the threads that appear meanwhile, named after it or by FFmpeg
    (``av:…``), are claimed for it by id. Such calls are serialized in the process, so that two
    opening at once do not claim each other's threads: keep them short (a codec opens in
    milliseconds; an ONNX Runtime session, whose threads keep the name, needs only
    :func:`named`)."""
    tag = tag if tag is not None else _local.tag
    if tag is None or _LIBC is None:
        yield
        return
    with _claims_lock:
        before = _task_ids()
        with named(tag):
            try:
                yield
            finally:
                _claim_new(tag, before)


def _claim_new(tag: Tag, before: set[int]) -> None:
    now = _task_ids()
    for tid in list(_claimed):  # threads that are gone: their ids may be reused
        if tid not in now:
            del _claimed[tid]
    for tid in now - before:
        name = task_name(tid)
        if name == tag.name or name.startswith(FOREIGN_PREFIXES):
            _claimed[tid] = tag


def claimed() -> dict[int, Tag]:
    """Thread id -> the tag it was claimed for (threads that may have renamed themselves)."""
    with _claims_lock:
        return dict(_claimed)


ENDINGS_KEPT = 256
"""Threads noted by :func:`ending` that the CPU ledger has not read yet, at most (oldest go)."""
_endings: dict[int, tuple[Tag, int]] = {}


def ending(tag: Tag | None = None) -> None:
    """Before the threads claimed for ``tag`` (by default the calling thread's) end, as a codec
    closes: note their CPU time now, which ``/proc`` stops showing once they are gone, so that
    the CPU ledger counts what they did since its last look (a looped file reopens its decoder
    every few seconds)."""
    tag = tag if tag is not None else _local.tag
    if tag is None:
        return
    with _claims_lock:
        for tid in [tid for tid, t in _claimed.items() if t is tag]:
            cpu_ns = task_cpu_ns(tid)
            if cpu_ns is not None:
                _endings[tid] = (tag, cpu_ns)
        while len(_endings) > ENDINGS_KEPT:
            del _endings[next(iter(_endings))]


def thread_ending() -> None:
    """At the end of a tagged thread's life (a decode thread, a tagged pool's worker): note its
    own time outside counted calls (:mod:`~edgepipe.core.cputime`, whose counts outlive it), as
    :func:`ending` does for a codec's threads."""
    tag = _local.tag
    if tag is None:
        return
    outside_ns = time.thread_time_ns() - cputime.own_total_ns()
    with _claims_lock:
        _endings[threading.get_native_id()] = (tag, outside_ns)


def endings() -> dict[int, tuple[Tag, int]]:
    """Thread id -> (its tag, its CPU ns outside counted calls when :func:`ending` or
    :func:`thread_ending` noted it), taken: each is given once."""
    with _claims_lock:
        taken = dict(_endings)
        _endings.clear()
        return taken


def _task_ids(task_dir: str = TASK_DIR) -> set[int]:
    try:
        return {int(tid) for tid in os.listdir(task_dir)}
    except OSError:
        return set()


TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_stat(text: str) -> tuple[str, int]:
    """``(name, user + system ticks)`` from a ``/proc/<pid>/task/<tid>/stat`` line. The name is
    between the first ``(`` and the last ``)``: it may hold spaces and parentheses itself."""
    open_at, close_at = text.index("("), text.rindex(")")
    fields = text[close_at + 2 :].split()
    # after the name: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
    return text[open_at + 1 : close_at], int(fields[11]) + int(fields[12])


def read_stat(tid: int | str, task_dir: str = TASK_DIR, ticks_per_s: int = TICKS_PER_S) -> tuple[str, int]:
    """``(name, user + system ns)`` of thread ``tid`` of this process (the kernel's clock ticks,
    10 ms). Raises ``OSError`` once it is gone, ``ValueError`` for a line it cannot read."""
    fd = os.open(f"{task_dir}/{tid}/stat", os.O_RDONLY)
    try:
        raw = os.read(fd, 1024)
    finally:
        os.close(fd)
    try:
        name, ticks = parse_stat(raw.decode("utf-8", "replace"))
    except IndexError as exc:
        raise ValueError(f"not a stat line: {raw[:80]!r}") from exc
    return name, ticks * (1_000_000_000 // ticks_per_s)


def task_cpu_ns(tid: int) -> int | None:
    """User + system ns of thread ``tid`` of this process (None once it is gone)."""
    try:
        return read_stat(tid)[1]
    except (OSError, ValueError):
        return None


def task_name(tid: int, task_dir: str = TASK_DIR) -> str:
    """The name of thread ``tid`` of this process ("" when it is gone)."""
    try:
        with open(f"{task_dir}/{tid}/comm", "rb") as f:
            return f.read().rstrip(b"\n").decode("utf-8", "replace")
    except OSError:
        return ""
