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
destructor runs under a live call.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

_cond = threading.Condition()
_busy: Counter[str] = Counter()


class Native:
    """``with marker:`` around a native call; ``what`` names it in :func:`settle`'s answer.
    Re-entrant and usable from many threads at once."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        with _cond:
            _busy[self.what] += 1

    def __exit__(self, *exc: object) -> None:
        with _cond:
            _busy[self.what] -= 1
            if _busy[self.what] <= 0:
                del _busy[self.what]
            if not _busy:
                _cond.notify_all()


def in_progress() -> list[str]:
    """What is in progress now."""
    with _cond:
        return sorted(_busy)


def settle(timeout_s: float) -> list[str]:
    """Wait up to ``timeout_s`` for the native calls in progress; what is still running."""
    deadline = time.monotonic() + timeout_s
    with _cond:
        while _busy:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            _cond.wait(left)
        return sorted(_busy)
