"""Per-call spans of every node, for ``edgepipe trace``: off unless the run is given a recorder.

A run records spans when given a :class:`SpanRecorder` (``run(..., spans=SpanRecorder())``): it
is that run's, and runs beside it record nothing into it. When off (always, outside a trace) a
node's :attr:`~edgepipe.runtime.metrics.NodeMetrics.spans` is None and the per-item paths pay
one attribute test. When on, each call of a node's code
adds ``(start, duration, step)`` to its node's :class:`SpanLog`: three integers appended to
preallocated-growth arrays (no Python object per span), up to a limit per node, past which
spans are counted, not kept. Times are ``time.perf_counter_ns()``.

The recorder is the run's (:data:`SPANS`, in its scope: :mod:`edgepipe.core.scope`), so code deep
in the run finds it: with :attr:`SpanRecorder.profile_prefix` set, every model session loaded for
that run profiles its runs (ONNX Runtime's own profile, :mod:`edgepipe.infer.loading`), and a run
beside it, untraced, profiles nothing.
"""

from __future__ import annotations

import time
from array import array
from pathlib import Path
from typing import Protocol

from edgepipe.core.scope import Slot

STEPS = ("call", "prepare", "process", "next item")
"""What a span times: a stage's or sink's ``call``; a two-step node's ``prepare`` and
``process``; a source's wait for its ``next item`` (decoding, pacing), and a stream stage's
(an async generator over its input: its work and its waits for input together)."""
CALL, PREPARE, PROCESS, NEXT_ITEM = range(len(STEPS))

DEFAULT_LIMIT = 200_000
"""Spans kept per node (about 5 MB): a trace is minutes long, not months."""


class SpanLog:
    """The spans of one node. Appended to by the node's own task (or its processing step)."""

    __slots__ = ("dropped", "durations_ns", "limit", "node_id", "starts_ns", "steps")

    def __init__(self, node_id: str, limit: int = DEFAULT_LIMIT) -> None:
        self.node_id = node_id
        self.limit = limit
        self.starts_ns = array("q")
        self.durations_ns = array("q")
        self.steps = array("b")
        self.dropped = 0
        """Spans past :attr:`limit`, counted only."""

    def add(self, step: int, t0_ns: int, t1_ns: int) -> None:
        if len(self.steps) >= self.limit:
            self.dropped += 1
            return
        self.starts_ns.append(t0_ns)
        self.durations_ns.append(max(0, t1_ns - t0_ns))
        self.steps.append(step)

    def add_until_now(self, step: int, t0_ns: int) -> int:
        """A span from ``t0_ns`` to now; returns now (the start of the next one)."""
        now = time.perf_counter_ns()
        self.add(step, t0_ns, now)
        return now

    def __len__(self) -> int:
        return len(self.steps)


class Profiled(Protocol):
    """A model session profiling its runs (an ONNX Runtime ``InferenceSession``)."""

    def get_profiling_start_time_ns(self) -> int: ...

    def end_profiling(self) -> str:
        """Stop profiling; returns the path of the profile written."""
        ...


class SpanRecorder:
    """The span logs of every node of the run it was given to, and the model sessions that
    profile their runs for it."""

    def __init__(self, limit_per_node: int = DEFAULT_LIMIT, *, profile_prefix: str | None = None) -> None:
        self.limit_per_node = limit_per_node
        self.logs: dict[str, SpanLog] = {}
        self.profile_prefix = profile_prefix
        """While set, every model session loaded for the run profiles its runs (ONNX Runtime
        writes ``PREFIX<model>_<date>.json`` at ``end_profiling()``) and is added to
        :attr:`profiled`; None: none does."""
        self.profiled: list[tuple[str, Path, Profiled]] = []
        """``(model name, model path, session)`` of each session profiling for the run."""

    def log_for(self, node_id: str) -> SpanLog:
        log = self.logs.get(node_id)
        if log is None:
            log = self.logs[node_id] = SpanLog(node_id, self.limit_per_node)
        return log


SPANS: Slot[SpanRecorder | None] = Slot("span recorder", lambda: None)
"""The run's recorder (``run(..., spans=...)`` puts it in the run's scope); None outside a traced run."""
