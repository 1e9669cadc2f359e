"""One thread that terminates ONNX Runtime runs at their deadline.

ONNX Runtime has no run timeout of its own. What it has is ``RunOptions.terminate``: set from
another thread, the run stops at the next operator boundary and raises. A ``threading.Timer``
per run would start a thread per frame; instead every run registers its deadline here, and one
daemon thread sleeps until the earliest one. Arming and disarming cost a lock and a heap push.

A single operator that never returns (a driver stuck in a kernel) cannot be terminated this
way; the node's own ``timeout_s`` abandons such a call, and its thread stays with it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Any


class Watchdog:
    """Sets ``terminate`` on run options whose deadline passed. Thread-safe."""

    def __init__(self, name: str = "edgepipe-infer-watchdog") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Any]] = []
        self._armed: dict[int, Any] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self.fired = 0
        """Runs terminated so far."""

    def arm(self, run_options: Any, timeout_s: float) -> int:
        """Terminate ``run_options``' run ``timeout_s`` from now unless disarmed first."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            token = next(self._ids)
            self._armed[token] = run_options
            heapq.heappush(self._heap, (deadline, token, run_options))
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name=self._name, daemon=True)
                self._thread.start()
            if self._heap[0][1] == token:
                self._cond.notify()
        return token

    def disarm(self, token: int) -> bool:
        """Cancel a deadline. False if it already fired (the run was told to terminate)."""
        with self._cond:
            return self._armed.pop(token, None) is not None

    def _watch(self) -> None:
        with self._cond:
            while True:
                # Drop deadlines of runs that finished in time: their tokens are no longer armed.
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, token, run_options = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
                del self._armed[token]
                run_options.terminate = True
                self.fired += 1


WATCHDOG = Watchdog()
"""The process's watchdog, shared by every session."""
