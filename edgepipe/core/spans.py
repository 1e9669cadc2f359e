"""Per-call spans of every node, for ``edgepipe trace``: off unless the run is given a recorder.

A run records spans when given a :class:`SpanRecorder` (``run(..., spans=SpanRecorder())``): it
is that run's, and runs beside it record nothing into it. When off (always, outside a trace) a
node's :attr:`~edgepipe.runtime.metrics.NodeMetrics.spans` is None and the per-item paths pay
one attribute test. When on, each call of a node's code
adds ``(start, duration, step)`` to its node's :class:`SpanLog`: three integers appended to
preallocated-growth arrays (no Python object per span), up to a limit per node, past which
spans are counted, not kept. Times are ``time.perf_counter_ns()``.
"""

from __future__ import annotations

import time
from array import array

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


class SpanRecorder:
    """The span logs of every node of the run it was given to."""

    def __init__(self, limit_per_node: int = DEFAULT_LIMIT) -> None:
        self.limit_per_node = limit_per_node
        self.logs: dict[str, SpanLog] = {}

    def log_for(self, node_id: str) -> SpanLog:
        log = self.logs.get(node_id)
        if log is None:
            log = self.logs[node_id] = SpanLog(node_id, self.limit_per_node)
        return log
