"""Native work the process must not exit in the middle of: a model loading or running.

ONNX Runtime builds sessions and runs models on worker threads. If the process exits while such
a thread is inside the C++ library, the library's global objects are destroyed under it and it
calls ``std::terminate``: exit code 134 ("terminate called without an active exception")
instead of the pipeline's own code, after the right error line. That happened when a node failed
at start (a camera that cannot be opened) while the detector was loading its model or making its
first run.

Loaders and runners hold a :class:`Native` marker (made once, entered around each call: nothing
is allocated per call); ``edgepipe``'s command line calls :func:`settle` before it exits: it
waits a moment for the calls in progress, and when some are still running (a long load, a run
past its deadline) the process leaves with ``os._exit`` after flushing its output, so no C++
destructor runs under a live call. A call that cannot end soon (an open that FFmpeg cannot cut
short before its deadline) is marked ``wait=False``: it too makes the process leave with
``os._exit``, without the wait.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

_cond = threading.Condition()
_busy: Counter[str] = Counter()
_waited = 0
"""How many of the calls in progress :func:`settle` waits for."""


class Native:
    """``with marker:`` around a native call; ``what`` names it in :func:`settle`'s answer.
    Re-entrant and usable from many threads at once. ``wait``: whether :func:`settle` waits for
    it (False for a call that cannot end within a second)."""

    __slots__ = ("wait", "what")

    def __init__(self, what: str, *, wait: bool = True) -> None:
        self.what = what
        self.wait = wait

    def __enter__(self) -> None:
        global _waited
        with _cond:
            _busy[self.what] += 1
            _waited += self.wait

    def __exit__(self, *exc: object) -> None:
        global _waited
        with _cond:
            _busy[self.what] -= 1
            if _busy[self.what] <= 0:
                del _busy[self.what]
            _waited -= self.wait
            if not _waited:
                _cond.notify_all()


def in_progress() -> list[str]:
    """What is in progress now."""
    with _cond:
        return sorted(_busy)


def settle(timeout_s: float) -> list[str]:
    """Wait up to ``timeout_s`` for the native calls in progress (those marked ``wait``); what
    is still running, all of them."""
    deadline = time.monotonic() + timeout_s
    with _cond:
        while _waited:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            _cond.wait(left)
        return sorted(_busy)
