"""The figures of ``scripts/bench_headroom.py``, from what it recorded: pure functions only.

A run leaves three things: CPU and RSS samples of the pipeline's process (:class:`Sample`, one a
second, read from ``/proc/PID/stat``), its ``--results`` lines (:func:`parse_results`) and its
``--stats`` summary table on stderr (:func:`parse_dropped`). :func:`figures` cuts them to the
measured span (after warm-up) and returns the dict the benchmark prints.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

WITHIN_SLACK = 0.05
"""A 1 s window is within target when its CPU is at most target + this."""
EDGE_S = 10.0
"""Latency is compared between the first and the last this many seconds after warm-up."""


@dataclass(frozen=True, slots=True)
class Sample:
    """The pipeline's process at one moment."""

    t: float
    """Wall-clock seconds (``time.time()``: the clock of the result lines)."""
    cpu_s: float
    """User + system CPU seconds of the process so far (all its threads)."""
    rss_mb: float
    machine_busy_s: float = 0.0
    """Busy CPU seconds of the whole machine so far, every process (``/proc/stat``)."""


@dataclass(frozen=True, slots=True)
class Detected:
    """A frame the model ran on."""

    t: float
    source: str
    latency_ms: float | None


@dataclass(slots=True)
class Records:
    """What a run's result lines say."""

    detections: list[Detected] = field(default_factory=list)
    tokens: list[tuple[float, int]] = field(default_factory=list)
    """``(t, new_tokens)`` of each finished description."""

    @property
    def start(self) -> float | None:
        """When the first detection came: the run's work began (models loaded, cameras open)."""
        return min((d.t for d in self.detections), default=None)

    @property
    def end(self) -> float | None:
        """When the last detection came: the run stopped soon after."""
        return max((d.t for d in self.detections), default=None)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation, as numpy's default; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def cpu_fractions(samples: Sequence[Sample], cores: float, start: float, end: float) -> list[float]:
    """The process's CPU over each sampling window wholly inside ``[start, end]``, as a fraction
    of ``cores`` (1.0: every usable core busy for the whole window)."""
    out = []
    for a, b in itertools.pairwise(samples):
        if a.t >= start and b.t <= end and b.t > a.t:
            out.append((b.cpu_s - a.cpu_s) / (b.t - a.t) / cores)
    return out


def others_fraction(samples: Sequence[Sample], cores: float, start: float, end: float) -> float | None:
    """The mean CPU of every other process over ``[start, end]``, as a fraction of ``cores``: the
    noise of a shared machine, which the governor counts against nobody but the benchmark sees."""
    kept = [s for s in samples if start <= s.t <= end]
    if len(kept) < 2 or kept[-1].t <= kept[0].t:
        return None
    a, b = kept[0], kept[-1]
    others = (b.machine_busy_s - a.machine_busy_s) - (b.cpu_s - a.cpu_s)
    return round(max(0.0, others) / (b.t - a.t) / cores, 3)


def parse_results(lines: Iterable[str]) -> Records:
    """Detections the model ran on (``inferred``) and finished descriptions, from result lines.
    A line cut short (a run killed mid-write) or of another kind is skipped."""
    records = Records()
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
            continue
        data, t = record["data"], float(record.get("t", 0.0))
        if record.get("kind") == "detections" and data.get("inferred", True):
            latency = data.get("latency_ms")
            records.detections.append(Detected(t, str(data.get("source")), latency))
        elif record.get("kind") == "event" and "new_tokens" in data:
            records.tokens.append((t, int(data["new_tokens"])))
    return records


def parse_dropped(stats_text: str) -> dict[str, int]:
    """Items dropped per node, from the ``--stats`` summary table: what its inbox's lanes dropped
    (``dropped``), plus a source's frames dropped for want of a free one (``pool_drops=``) and
    items skipped while a circuit was open (``skipped=``). Empty if no table is found."""
    columns: list[str] = []
    rows: dict[str, tuple[str, str]] = {}
    node = ""
    for raw in stats_text.splitlines():
        line = raw.strip()
        if line.startswith("┃") and "node" in line and "dropped" in line:
            columns = [c.strip() for c in line.strip("┃").split("┃")]
            rows, node = {}, ""  # the last table printed is the summary
        elif line.startswith("│") and columns:
            cells = [c.strip() for c in line.strip("│").split("│")]
            if len(cells) != len(columns):
                continue
            cell = dict(zip(columns, cells, strict=True))
            if cell["node"]:
                node = cell["node"]
                rows[node] = (cell["dropped"], cell.get("info", ""))
            elif node:  # a wrapped info cell
                dropped, info = rows[node]
                rows[node] = (dropped, f"{info} {cell.get('info', '')}")
    out = {}
    for node, (dropped, info) in rows.items():
        count = int(dropped) if dropped.isdigit() else 0
        count += sum(int(n) for n in re.findall(r"\b(?:pool_drops|skipped|shed|aged)=(\d+)", info))
        out[node] = count
    return out


def _rate(count: float, span_s: float) -> float:
    return round(count / span_s, 2) if span_s > 0 else 0.0


def _p95(values: Iterable[float | None]) -> float | None:
    found = percentile([v for v in values if v is not None], 95)
    return None if found is None else round(found, 1)


def stream_figures(detections: Sequence[Detected], start: float, end: float) -> list[dict[str, Any]]:
    """Per source, over ``[start, end]``: detections/s, and the p95 latency over the first and
    the last :data:`EDGE_S` (half the span each when it is shorter)."""
    span = end - start
    edge = min(EDGE_S, span / 2)
    inside = [d for d in detections if start <= d.t <= end]
    out = []
    for source in sorted({d.source for d in inside}):
        mine = [d for d in inside if d.source == source]
        out.append({
            "source": source,
            "detections_per_s": _rate(len(mine), span),
            "latency_p95_first_ms": _p95(d.latency_ms for d in mine if d.t < start + edge),
            "latency_p95_last_ms": _p95(d.latency_ms for d in mine if d.t >= end - edge),
        })  # fmt: skip
    return out


def figures(
    samples: Sequence[Sample], records: Records, dropped: dict[str, int], *, cores: float, target: float,
    warmup_s: float, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    """One run's figures over its measured span: from ``warmup_s`` after the first detection to
    ``seconds`` after it (or the last detection, if that came sooner)."""
    first, last = records.start, records.end
    if first is None or last is None:
        raise ValueError("no detections in the results: the pipeline did not run (see its stderr)")
    start, end = first + warmup_s, min(first + seconds, last)
    if end <= start:
        raise ValueError(f"nothing left after the {warmup_s:g} s warm-up (run {last - first:.1f} s)")
    cpu = cpu_fractions(samples, cores, start, end)
    kept = [s for s in samples if start <= s.t <= end]
    span = end - start
    return {
        "measured_s": round(span, 1),
        "cpu_mean": round(sum(cpu) / len(cpu), 3) if cpu else None,
        "cpu_p95": None if not cpu else round(percentile(cpu, 95) or 0.0, 3),
        "within_target": round(sum(f <= target + WITHIN_SLACK for f in cpu) / len(cpu), 3) if cpu else None,
        "detections_per_s": _rate(sum(start <= d.t <= end for d in records.detections), span),
        "streams": stream_figures(records.detections, start, end),
        "tokens_per_s": _rate(sum(n for t, n in records.tokens if start <= t <= end), span),
        "dropped": dropped,
        "others_cpu_mean": others_fraction(samples, cores, start, end),
        # RSS swings by tens of MB from one second to the next (malloc arenas of the decode and
        # model threads): each end is the mean over the same 10 s windows as the latencies.
        "rss_start_mb": _mean_rss(kept, start, start + min(EDGE_S, span / 2)),
        "rss_end_mb": _mean_rss(kept, end - min(EDGE_S, span / 2), end),
    }


def _mean_rss(samples: Sequence[Sample], start: float, end: float) -> float | None:
    values = [s.rss_mb for s in samples if start <= s.t <= end]
    return round(sum(values) / len(values), 1) if values else None


@dataclass(frozen=True, slots=True)
class Targets:
    """The acceptance targets, judged on the governed run (the ungoverned one is shown beside)."""

    cpu_p95: float
    detections_per_s: float
    """All streams together."""
    per_camera: float
    fairness: float
    """The slowest stream's rate over the fastest's."""
    latency_growth: float
    latency_slack_ms: float
    """Per stream: last-10-s p95 latency <= growth x first-10-s p95 + slack."""
    rss_growth: float
    cameras: int


def judge(run: dict[str, Any], targets: Targets) -> dict[str, tuple[bool, str]]:
    """Each target's name -> (met, the figure as printed) for one run's figures."""
    tg = targets
    streams = run["streams"]
    rates = [s["detections_per_s"] for s in streams]
    every_camera = len(rates) == tg.cameras
    fair = min(rates) / max(rates) if rates and max(rates) > 0 else 0.0
    margins = [
        s["latency_p95_last_ms"] - (tg.latency_growth * s["latency_p95_first_ms"] + tg.latency_slack_ms)
        for s in streams
        if s["latency_p95_first_ms"] is not None and s["latency_p95_last_ms"] is not None
    ]
    start, end = run["rss_start_mb"], run["rss_end_mb"]
    growth = (end - start) / start if start and end is not None else None
    cpu = run["cpu_p95"]
    return {
        f"cpu_p95 <= {tg.cpu_p95}": (cpu is not None and cpu <= tg.cpu_p95, f"{cpu}"),
        f"detections_per_s >= {tg.detections_per_s:g} (all streams)": (
            run["detections_per_s"] >= tg.detections_per_s,
            f"{run['detections_per_s']:.2f}",
        ),
        f"detections_per_s >= {tg.per_camera:g} on each of {tg.cameras} cameras": (
            every_camera and min(rates) >= tg.per_camera,
            f"min {min(rates, default=0.0):.2f} ({len(rates)})",
        ),
        f"slowest stream >= {tg.fairness:g} x the fastest": (
            every_camera and fair >= tg.fairness,
            f"{fair:.2f}",
        ),
        f"latency_p95_last <= {tg.latency_growth:g} x first + {tg.latency_slack_ms:g} ms": (
            every_camera and len(margins) == len(streams) and max(margins) <= 0,
            f"worst {max(margins):+.0f} ms" if margins else "-",
        ),
        "tokens_per_s > 0": (run["tokens_per_s"] > 0, f"{run['tokens_per_s']:.1f}"),
        f"RSS growth < {tg.rss_growth:.0%}": (
            growth is not None and growth < tg.rss_growth,
            "-" if growth is None else f"{growth:+.1%}",
        ),
    }


def ratio(governed: float | None, ungoverned: float | None) -> float | None:
    """governed / ungoverned, rounded; None when either is missing or the baseline is 0."""
    if governed is None or not ungoverned:
        return None
    return round(governed / ungoverned, 3)
