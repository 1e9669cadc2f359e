"""Runs of a loaded ONNX Runtime session: a deadline on each (terminated by the watchdog),
retries, counters, and ONNX Runtime's exceptions mapped to edgepipe's errors."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from edgepipe.core.errors import error_text
from edgepipe.core.native import Native
from edgepipe.infer.diagnose import run_error
from edgepipe.infer.errors import InferError, InferTimeout, ModelInputError
from edgepipe.infer.loading import ORT_QUIET
from edgepipe.infer.spec import TensorSpec
from edgepipe.infer.watchdog import WATCHDOG
from edgepipe.sched.gate import AdmissionTimeout, Ticket
from edgepipe.sched.gate import gate as current_gate

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SessionStats:
    """Counters of one session's runs (read from any thread; written by the running ones)."""

    runs: int = 0
    failures: int = 0
    timeouts: int = 0
    retries: int = 0
    busy_s: float = 0.0
    last_run_ms: float = 0.0
    load_ms: float = 0.0
    first_result_ms: float | None = None
    """From the start of loading to the end of the first successful run."""


class GuardedRuns:
    """Runs one ONNX Runtime session under deadlines, counted in ``stats``. Blocking;
    thread-safe (ONNX Runtime allows concurrent runs of one session)."""

    def __init__(
        self,
        session: ort.InferenceSession,
        stats: SessionStats,
        *,
        name: str,
        inputs: Sequence[TensorSpec],
        t_start: float,
        ticket: Ticket,
    ) -> None:
        """
        name: the model's name in errors and logs.
        inputs: the model's inputs, to say which feed of a failed run does not fit.
        t_start: ``time.perf_counter()`` when loading began (for the first result's time).
        ticket: how each run is admitted to the CPU budget (:mod:`edgepipe.sched.gate`).
        """
        self.ticket = ticket
        self.session: ort.InferenceSession | None = session
        """None once the model was let go (:meth:`Session.close`)."""
        self.stats = stats
        self.name = name
        self.inputs = inputs
        self._t_start = t_start
        self._free_options: list[ort.RunOptions] = []
        self._mine = threading.local()
        """The calling thread's last run (``ms``): concurrent runs each read their own."""
        self._first_lock = threading.Lock()
        self._native = Native(f"a run of model {name}")

    def run(
        self, feeds: Mapping[str, np.ndarray], names: list[str], timeout_s: float | None, retries: int
    ) -> list[np.ndarray]:
        """The outputs ``names`` of a run on ``feeds``, tried up to ``1 + retries`` times.

        A run past ``timeout_s`` is terminated at the next operator boundary. Raises
        :class:`InferTimeout`, :class:`ModelInputError` (a feed that does not fit the model;
        never retried), or :class:`InferError` for a failure of the run.
        """
        attempts = 1 + max(0, retries)
        for attempt in range(attempts):
            try:
                outputs: list[np.ndarray] = self._guarded(self.live().run, (names, feeds), timeout_s, feeds)
                return outputs
            except ModelInputError:
                raise
            except InferError:
                if attempt + 1 == attempts:
                    raise
                self.stats.retries += 1
        raise AssertionError("unreachable")

    def run_bound(self, binding: Any, timeout_s: float | None) -> None:
        """A run with inputs and outputs bound (an ``IOBinding``). Same deadline, counting and
        errors as :meth:`run`, never retried (a terminated run may have written part of its
        outputs)."""
        self._guarded(self.live().run_with_iobinding, (binding,), timeout_s, None)

    @property
    def thread_run_ms(self) -> float:
        """How long the calling thread's last successful run took (0 before any): with runs
        of one session on several threads at once, ``stats.last_run_ms`` is anyone's."""
        return float(getattr(self._mine, "ms", 0.0))

    def live(self) -> ort.InferenceSession:
        """The session; :class:`InferError` once it was closed."""
        session = self.session
        if session is None:
            raise InferError("the session is closed (its node stopped); start it again", model=self.name)
        return session

    def _guarded(self, fn: Any, args: tuple[Any, ...], timeout_s: float | None,
                 feeds: Mapping[str, np.ndarray] | None) -> Any:  # fmt: skip
        """``fn(*args, run_options)`` admitted to the CPU budget, under the deadline watchdog,
        counted; errors mapped. Waiting for the budget has the run's deadline too."""
        gate = current_gate()
        try:
            held = gate.enter(self.ticket, timeout_s)
        except AdmissionTimeout as exc:
            self.stats.timeouts += 1
            raise InferTimeout(str(exc), model=self.name) from None
        try:
            return self._timed(fn, args, timeout_s, feeds)
        finally:
            gate.leave(self.ticket, held)

    def _timed(self, fn: Any, args: tuple[Any, ...], timeout_s: float | None,
               feeds: Mapping[str, np.ndarray] | None) -> Any:  # fmt: skip
        try:
            options = self._free_options.pop()
        except IndexError:  # none free: concurrent runs (one abandoned at a node's deadline)
            options = _run_options()
        token = WATCHDOG.arm(options, timeout_s) if timeout_s is not None else None
        t0 = time.perf_counter()
        try:
            with self._native:  # the process must not exit under a run (see core/native.py)
                result = fn(*args, options)
        except Exception as exc:
            terminated = token is not None and not WATCHDOG.disarm(token)
            elapsed = time.perf_counter() - t0
            self.stats.runs += 1
            self.stats.busy_s += elapsed
            self.stats.failures += 1
            options.terminate = False
            self._free_options.append(options)
            if terminated:
                self.stats.timeouts += 1
                raise InferTimeout(
                    f"run terminated after {elapsed * 1000:.0f} ms (deadline {timeout_s * 1000:.0f} ms)",  # type: ignore[operator]
                    model=self.name,
                ) from exc
            if feeds is None:
                raise InferError(f"run failed: {error_text(exc)}", model=self.name) from exc
            raise run_error(exc, feeds, self.inputs, self.name) from exc
        if token is not None and not WATCHDOG.disarm(token):
            options.terminate = False  # fired just as the run returned: the result is whole
        elapsed = time.perf_counter() - t0
        self._free_options.append(options)
        stats = self.stats
        stats.runs += 1
        stats.busy_s += elapsed
        stats.last_run_ms = self._mine.ms = elapsed * 1000
        if stats.first_result_ms is None:
            self._first_result()
        return result

    def _first_result(self) -> None:
        with self._first_lock:
            if self.stats.first_result_ms is not None:
                return
            self.stats.first_result_ms = (time.perf_counter() - self._t_start) * 1000
        log.info(
            "model %s: first result %.0f ms after loading began (load %.0f ms, first run %.0f ms)",
            self.name, self.stats.first_result_ms, self.stats.load_ms, self.stats.last_run_ms,
        )  # fmt: skip


def _run_options() -> ort.RunOptions:
    options = ort.RunOptions()
    options.log_severity_level = ORT_QUIET
    return options
