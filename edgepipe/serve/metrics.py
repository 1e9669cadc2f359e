"""``GET /metrics``: the runtime snapshot in the Prometheus text format, read at scrape time.

One :class:`SnapshotCollector` per app, in a registry of its own (never prometheus-client's
global one: two pipelines in one process, or a test after another, must not share metrics).
Every label value goes through :func:`~edgepipe.wire.redact.redact_text`.

Families (all prefixed ``edgepipe_``): per node ``node_items_in_total``,
``node_items_out_total``, ``node_errors_total``, ``node_skipped_total``, ``node_restarts_total``,
``node_busy_seconds_total``, ``node_blocked_seconds_total``, ``node_latency_seconds``
(``quantile`` 0.5/0.95/0.99 over the recent window), ``node_state`` (1 for the current state),
``node_calls_in_flight`` and ``node_instances`` (stages and sinks),
``node_gauge`` (a node's numeric gauges by ``name``), ``source_state``; per inbox lane
``lane_depth``, ``lane_max_depth``, ``lane_capacity``, ``lane_put_total``,
``lane_lost_total`` (``reason``: dropped, shed, aged); the scheduler's ``sched_*`` figures
when there is one, with the CPU ledger's ``cpu_seconds_total`` (``node``, ``kind``),
``cpu_cores`` (``kind``), ``cpu_process_seconds_total``, ``node_cpu_seconds_per_item`` and
``node_wall_seconds_per_item``; ``uptime_seconds``.

Scrapes do not load the pipeline: the app reads the snapshot through a :class:`SnapshotCache`
(one ``runtime.snapshot()`` per :data:`SNAPSHOT_MAX_AGE_S`, shared with ``/health``) and
:class:`MetricsText` renders the exposition once per snapshot, so a scraper hammering
``/metrics`` gets the same bytes for up to 0.5 s, whatever its rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from edgepipe.runtime.engine import Snapshot
from edgepipe.wire.redact import redact_text

P = "edgepipe_"
NODE = ["node", "kind"]
LANE = ["node", "lane", "policy"]
SNAPSHOT_MAX_AGE_S = 0.5
"""The oldest snapshot ``/metrics`` and ``/health`` answer from."""


class SnapshotCache:
    """``snapshot()`` taken at most once per ``max_age_s`` (:data:`SNAPSHOT_MAX_AGE_S`): calls
    in between get the same :class:`Snapshot`. ``taken`` counts the real calls. Event loop only."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        max_age_s: float = SNAPSHOT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not max_age_s >= 0:
            raise ValueError(f"max_age_s must be >= 0, not {max_age_s}")
        self.max_age_s = max_age_s
        self.taken = 0
        self._snapshot = snapshot
        self._clock = clock
        self._last: Snapshot | None = None
        self._t_last = float("-inf")

    def __call__(self) -> Snapshot:
        now = self._clock()
        if self._last is None or now - self._t_last >= self.max_age_s:
            self._last, self._t_last = self._snapshot(), now
            self.taken += 1
        return self._last


class MetricsText:
    """The ``/metrics`` body, rendered once per snapshot that ``snapshots`` returns. Collectors
    added to ``registry`` (the viewers' figures) are read at the same renders: as old as the
    snapshot, at most."""

    def __init__(self, snapshots: Callable[[], Snapshot]) -> None:
        self._snapshots = snapshots
        self._snap: Snapshot | None = None
        self._body = b""
        self.registry = registry_for(self._current)
        self.rendered = 0
        """Times the exposition was generated (tests)."""

    def _current(self) -> Snapshot:
        assert self._snap is not None
        return self._snap

    def body(self) -> bytes:
        snap = self._snapshots()
        if snap is not self._snap:
            self._snap = snap
            self._body = generate_latest(self.registry)
            self.rendered += 1
        return self._body


class SnapshotCollector(Collector):
    """Turns ``snapshot()`` into metric families on every scrape (nothing is kept between)."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        yield GaugeMetricFamily(P + "uptime_seconds", "Seconds since the pipeline started.", value=snap.t_s)
        yield from _nodes(snap)
        yield from _lanes(snap)
        if snap.sched is not None:
            yield from _sched(snap.sched)


def registry_for(snapshot: Callable[[], Snapshot]) -> CollectorRegistry:
    """A registry of its own holding one collector over ``snapshot``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    return registry


def _nodes(snap: Snapshot) -> Iterator[Metric]:
    def counter(name: str, doc: str) -> CounterMetricFamily:
        return CounterMetricFamily(P + name, doc, labels=NODE)

    items_in = counter("node_items_in", "Items taken from the node's inbox (skipped ones included).")
    items_out = counter("node_items_out", "Items the node emitted downstream.")
    errors = counter("node_errors", "Calls of the node's code that raised or timed out.")
    skipped = counter("node_skipped", "Items dropped while the node's circuit was open.")
    restarts = counter("node_restarts", "Restarts by the node's error policy.")
    busy = counter("node_busy_seconds", "Time spent in the node's code.")
    blocked = counter("node_blocked_seconds", "Time spent waiting for downstream to take an output.")
    latency = GaugeMetricFamily(
        P + "node_latency_seconds", "One call's time over the recent window.", labels=[*NODE, "quantile"]
    )
    state = GaugeMetricFamily(P + "node_state", "1 for the node's current state.", labels=[*NODE, "state"])
    in_flight = GaugeMetricFamily(
        P + "node_calls_in_flight", "Calls of the node's code running now.", labels=NODE
    )
    instances = GaugeMetricFamily(
        P + "node_instances", "The most calls of the node's code it runs at once.", labels=NODE
    )
    gauge = GaugeMetricFamily(
        P + "node_gauge", "What the node's code reports (numbers).", labels=[*NODE, "name"]
    )
    source = GaugeMetricFamily(
        P + "source_state", "1 for a source's current state (live, stalled …).", labels=["node", "state"]
    )
    for n in snap.nodes:
        labels = [redact_text(n.node_id), n.kind]
        items_in.add_metric(labels, n.items_in)
        items_out.add_metric(labels, n.items_out)
        errors.add_metric(labels, n.errors)
        skipped.add_metric(labels, n.skipped)
        restarts.add_metric(labels, n.restarts)
        busy.add_metric(labels, n.busy_s)
        blocked.add_metric(labels, n.blocked_s)
        for q, ms in (("0.5", n.latency_p50_ms), ("0.95", n.latency_p95_ms), ("0.99", n.latency_p99_ms)):
            if ms is not None:
                latency.add_metric([*labels, q], ms / 1e3)
        state.add_metric([*labels, n.state], 1)
        if n.kind != "source":
            in_flight.add_metric(labels, n.in_flight)
            instances.add_metric(labels, n.instances)
        for name, value in n.gauges.items():
            if name == "source" and isinstance(value, str):
                source.add_metric([labels[0], redact_text(value)], 1)
            elif isinstance(value, int | float):
                gauge.add_metric([*labels, redact_text(str(name))], float(value))
    yield from (items_in, items_out, errors, skipped, restarts, busy, blocked, latency, state, in_flight,
                instances, gauge, source)  # fmt: skip


def _lanes(snap: Snapshot) -> Iterator[Metric]:
    depth = GaugeMetricFamily(P + "lane_depth", "Items queued in an inbox lane.", labels=LANE)
    max_depth = GaugeMetricFamily(
        P + "lane_max_depth", "The most items ever queued in the lane.", labels=LANE
    )
    capacity = GaugeMetricFamily(P + "lane_capacity", "The lane's size in items.", labels=LANE)
    put = CounterMetricFamily(P + "lane_put", "Items accepted into the lane.", labels=LANE)
    lost = CounterMetricFamily(
        P + "lane_lost",
        "Items the lane lost: dropped by its policy, shed by the governor, aged past max_age_s.",
        labels=[*LANE, "reason"],
    )
    for c in snap.channels:
        labels = [redact_text(c.consumer), redact_text(c.name), c.policy]
        depth.add_metric(labels, c.depth)
        max_depth.add_metric(labels, c.max_depth)
        capacity.add_metric(labels, c.size)
        put.add_metric(labels, c.put)
        lost.add_metric([*labels, "dropped"], c.dropped)
        lost.add_metric([*labels, "shed"], c.shed)
        lost.add_metric([*labels, "aged"], c.aged)
    yield from (depth, max_depth, capacity, put, lost)


_SCHED_GAUGES = {
    "cpu": ("sched_cpu_ratio", "Process CPU over the usable cores (last window)."),
    "target": ("sched_target_ratio", "The CPU share the governor aims at."),
    "target_now": ("sched_target_now_ratio", "The target now (lowered when hot)."),
    "cores": ("sched_cores", "Usable cores (affinity, cgroup)."),
    "level": ("sched_level", "The governor's level: rungs of work slowed."),
    "rungs": ("sched_rungs", "How many rungs the governor has."),
    "temp_c": ("sched_temperature_celsius", "The hottest thermal zone."),
}
_SCHED_COUNTERS = {
    "ups": ("sched_governor_ups", "Times the governor slowed work."),
    "downs": ("sched_governor_downs", "Times the governor restored work."),
    "overlap_s": ("sched_overlap_seconds", "Time two heavy kinds of work ran at once."),
    "detect_lm_overlap_s": ("sched_detect_lm_overlap_seconds", "Time detection and token decode overlapped."),
    "waits": ("sched_waits", "Heavy calls that waited for the CPU budget."),
    "waited_s": ("sched_waited_seconds", "Time heavy calls waited for the CPU budget."),
}


def _sched(sched: dict[str, Any]) -> Iterator[Metric]:
    for key, (name, doc) in _SCHED_GAUGES.items():
        if isinstance(sched.get(key), int | float):
            yield GaugeMetricFamily(P + name, doc, value=float(sched[key]))
    for key, (name, doc) in _SCHED_COUNTERS.items():
        if isinstance(sched.get(key), int | float):
            yield CounterMetricFamily(P + name, doc, value=float(sched[key]))
    heavy = CounterMetricFamily(
        P + "sched_heavy_busy_seconds", "Time heavy calls of each kind ran.", labels=["kind"]
    )
    for kind, seconds in (sched.get("heavy_busy_s") or {}).items():
        heavy.add_metric([redact_text(str(kind))], float(seconds))
    yield heavy
    resources = GaugeMetricFamily(
        P + "sched_resource_load", "Busy share of each resource's threads (last window).", labels=["resource"]
    )
    for resource, value in (sched.get("resources") or {}).items():
        if isinstance(value, int | float):
            resources.add_metric([redact_text(str(resource))], float(value))
    yield resources
    ledger = sched.get("cpu_ledger")
    if isinstance(ledger, dict) and ledger:
        yield from _ledger(ledger)


def _ledger(ledger: dict[str, Any]) -> Iterator[Metric]:
    """The CPU ledger: seconds by node and kind (``node`` "" for ``runtime`` and ``overhead``:
    together they add up to the process's CPU), cores by kind over the last window, and each
    node's CPU and wall time per item."""
    seconds = CounterMetricFamily(
        P + "cpu_seconds", "CPU time by node and kind of work since the run began (sums to the process's).",
        labels=["node", "kind"],
    )  # fmt: skip
    nodes = ledger.get("nodes") or {}
    in_nodes: dict[str, float] = {}
    for node, figures in nodes.items():
        for kind, value in (figures.get("kinds_s") or {}).items():
            seconds.add_metric([redact_text(str(node)), str(kind)], float(value))
            in_nodes[kind] = in_nodes.get(kind, 0.0) + float(value)
    for kind, value in (ledger.get("kinds_s") or {}).items():
        rest = float(value) - in_nodes.get(kind, 0.0)  # the runtime's and the overhead
        if rest > 1e-9:
            seconds.add_metric(["", str(kind)], rest)
    yield seconds
    cores = GaugeMetricFamily(P + "cpu_cores", "Cores busy by kind of work (last window).", labels=["kind"])
    for kind, value in (ledger.get("kinds_cores") or {}).items():
        cores.add_metric([str(kind)], float(value))
    yield cores
    yield CounterMetricFamily(
        P + "cpu_process_seconds",
        "The process's CPU time since the run began.",
        value=float(ledger["process_s"]),
    )
    cpu_item = GaugeMetricFamily(
        P + "node_cpu_seconds_per_item", "CPU time per item handled (last window).", labels=["node"]
    )
    wall_item = GaugeMetricFamily(
        P + "node_wall_seconds_per_item",
        "Time in the node's code per item (last window): above the CPU, it waited for a core or a device.",
        labels=["node"],
    )
    for node, figures in nodes.items():
        for family, key in ((cpu_item, "cpu_ms_per_item"), (wall_item, "wall_ms_per_item")):
            value = figures.get(key)
            if isinstance(value, int | float):
                family.add_metric([redact_text(str(node))], value / 1e3)
    yield from (cpu_item, wall_item)
