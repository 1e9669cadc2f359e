"""One run's figures for :mod:`.bench`, from what it recorded: pure functions only.

A run leaves three things: CPU and RSS samples of the pipeline's process (:class:`Sample`, one a
second, read from ``/proc/PID/stat``), its ``--results`` lines (:func:`parse_results`) and its
stderr: the log (what each model was loaded with, :func:`parse_models`) and the ``--stats``
summary (:func:`parse_stats`). :func:`figures` cuts them to the measured span (after warm-up)
and returns the dict the benchmark prints for the run; :mod:`.summary` puts runs
together and judges them.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

WITHIN_SLACK = 0.05
"""A 1 s window is within target when its CPU is at most target + this."""
EDGE_S = 10.0
"""Latency is compared between the first and the last this many seconds after warm-up."""
WINDOW_S = 1.0
"""The windows a stream's rate of detector outputs is counted in (``rate_cv``)."""


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
    threads: int = 0
    """Threads of the process (``/proc/PID/stat`` num_threads), 0 when unknown."""


@dataclass(frozen=True, slots=True)
class Output:
    """A detector output: a frame the model ran on (``inferred``) or one the tracker carried."""

    t: float
    source: str
    latency_ms: float | None
    inferred: bool = True
    seq: int | None = None
    """The frame's number in its source: frames decoded so far, pool drops included."""
    infer_ms: float | None = None
    """Wall time of the model run (inferred outputs only)."""


@dataclass(frozen=True, slots=True)
class Description:
    """A finished description: its tokens and the prompt that went before them."""

    t: float
    new_tokens: int
    prompt_tokens: int = 0


@dataclass(slots=True)
class Records:
    """What a run's result lines say."""

    outputs: list[Output] = field(default_factory=list)
    descriptions: list[Description] = field(default_factory=list)
    written: list[float] = field(default_factory=list)
    """When each result line was made (``t``), every kind."""

    @property
    def detections(self) -> list[Output]:
        """The outputs the model ran on."""
        return [o for o in self.outputs if o.inferred]

    @property
    def start(self) -> float | None:
        """When the first detection came: the run's work began (models loaded, cameras open)."""
        return min((o.t for o in self.outputs), default=None)

    @property
    def end(self) -> float | None:
        """When the last detection came: the run stopped soon after."""
        return max((o.t for o in self.outputs), default=None)


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


def cpu_rate(samples: Sequence[Sample], start: float, end: float) -> float | None:
    """The process's CPU seconds per second over ``[start, end]`` (first to last sample in it)."""
    kept = [s for s in samples if start <= s.t <= end]
    if len(kept) < 2 or kept[-1].t <= kept[0].t:
        return None
    return (kept[-1].cpu_s - kept[0].cpu_s) / (kept[-1].t - kept[0].t)


def others_fraction(samples: Sequence[Sample], cores: float, start: float, end: float) -> float | None:
    """The mean CPU of every other process over ``[start, end]``, as a fraction of ``cores``: the
    noise of a shared machine, which the governor counts against nobody but the benchmark sees."""
    kept = [s for s in samples if start <= s.t <= end]
    if len(kept) < 2 or kept[-1].t <= kept[0].t:
        return None
    a, b = kept[0], kept[-1]
    others = (b.machine_busy_s - a.machine_busy_s) - (b.cpu_s - a.cpu_s)
    return round(max(0.0, others) / (b.t - a.t) / cores, 3)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_results(lines: Iterable[str]) -> Records:
    """Detector outputs (model runs and tracker carries), finished descriptions and the time of
    every line, from result lines. A line cut short (a run killed mid-write) is skipped."""
    records = Records()
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        t = float(record.get("t", 0.0))
        records.written.append(t)
        data = record.get("data")
        if not isinstance(data, dict):
            continue
        if record.get("kind") == "detections":
            seq = data.get("seq")
            records.outputs.append(Output(
                t, str(data.get("source")), _number(data.get("latency_ms")), bool(data.get("inferred", True)),
                seq if isinstance(seq, int) else None, _number(data.get("infer_ms")),
            ))  # fmt: skip
        elif record.get("kind") == "event" and "new_tokens" in data:
            records.descriptions.append(
                Description(t, int(data["new_tokens"]), int(data.get("prompt_tokens") or 0))
            )
    return records


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """A node's row of the ``--stats`` summary and its gauges line."""

    dropped: int
    """The inbox's drops (the ``drop`` column)."""
    info: dict[str, str]
    """The gauges under the table (``decoded=1181``, ``pool_drops=42`` ...)."""


def _count(cell: str) -> int:
    if cell.isdigit():
        return int(cell)
    return round(float(cell[:-1]) * 1e6) if re.fullmatch(r"\d+(\.\d+)?M", cell) else 0


def parse_stats(stats_text: str) -> dict[str, NodeSummary]:
    """Each node's drops and gauges from the last ``--stats`` summary on stderr: a table whose
    header starts ``node`` and ends ``drop`` (one row per node: its id first, its drops last),
    then a line of ``key=value`` gauges per node (wrapped lines start with spaces). Empty if no
    summary is found."""
    dropped: dict[str, int] = {}
    info: dict[str, str] = {}
    section, node = "", ""
    for raw in stats_text.splitlines():
        words = raw.split()
        if words[:1] == ["node"] and words[-1:] == ["drop"]:
            dropped, info, section, node = {}, {}, "table", ""  # the last table printed is the summary
            continue
        if section in ("", "done") or not words or set(raw.strip()) <= {"─", "━", " "}:
            continue
        indented = raw[0].isspace()
        if not indented and len(words) > 1 and "=" in words[1]:  # a node's gauges
            section, node = "info", words[0]
            info[node] = " ".join(words[1:])
        elif indented and section == "info":  # its gauges, wrapped
            info[node] += " " + " ".join(words)
        elif not indented and section == "table" and len(words) > 1:
            dropped[words[0]] = _count(words[-1])
        elif not indented:  # the scheduler's line, a log line: the summary is over
            section = "done"
    return {
        n: NodeSummary(dropped.get(n, 0), dict(re.findall(r"(\w+)=(\S+)", info.get(n, ""))))
        for n in {**dropped, **info}
    }


def parse_dropped(stats_text: str) -> dict[str, int]:
    """Items dropped per node over the run, from the ``--stats`` summary: what its inbox's lanes
    dropped, plus a source's frames dropped for want of a free one (``pool_drops``), items
    skipped while a circuit was open (``skipped``), shed by the governor (``shed``) or too old
    (``aged``). Empty if no summary is found."""
    out = {}
    for node, row in parse_stats(stats_text).items():
        extra = (row.info.get(k, "0") for k in ("pool_drops", "skipped", "shed", "aged"))
        out[node] = row.dropped + sum(int(v) for v in extra if v.isdigit())
    return out


_LOADED = re.compile(
    r"model (?P<name>.+?): loaded in [\d.]+ ms on (?P<provider>\w+), (?P<threads>\d+) threads?(?P<rest>.*)$"
)
_BUDGET = re.compile(r"(CPU budget: .*)$")


def parse_models(log_text: str) -> dict[str, dict[str, Any]]:
    """What each model was loaded with, from the log's ``model NAME: loaded in ... on PROVIDER,
    N thread(s)[, spinning][ (cached optimized graph)]`` lines: ``{name: {threads, provider,
    spinning, cached}}`` (a model loaded again keeps its last line)."""
    out: dict[str, dict[str, Any]] = {}
    for line in log_text.splitlines():
        found = _LOADED.search(line)
        if found:
            rest = found["rest"]
            out[found["name"]] = {
                "threads": int(found["threads"]), "provider": found["provider"],
                "spinning": rest.startswith(", spinning"), "cached": "cached optimized graph" in rest,
            }  # fmt: skip
    return out


def parse_budget(log_text: str) -> str | None:
    """The log's ``CPU budget: ...`` line (its text from there on), or None."""
    found = [m[1] for m in map(_BUDGET.search, log_text.splitlines()) if m]
    return found[-1] if found else None


def _rate(count: float, span_s: float) -> float:
    return round(count / span_s, 2) if span_s > 0 else 0.0


def _p95(values: Iterable[float | None]) -> float | None:
    found = percentile([v for v in values if v is not None], 95)
    return None if found is None else round(found, 1)


def rate_cv(times: Sequence[float], start: float, end: float, window_s: float = WINDOW_S) -> float | None:
    """The coefficient of variation (sample stdev / mean) of the count of ``times`` in each whole
    ``window_s`` window from ``start`` on; None with fewer than two windows or none counted."""
    windows = int((end - start) // window_s)
    if windows < 2:
        return None
    counts = [0] * windows
    for t in times:
        index = int((t - start) // window_s)
        if 0 <= index < windows:
            counts[index] += 1
    mean = sum(counts) / windows
    return round(statistics.stdev(counts) / mean, 3) if mean > 0 else None


def decoded_per_s(outputs: Sequence[Output]) -> float | None:
    """Frames the source decoded per second, from the frame numbers of its outputs (the first
    to the last): what the camera delivered, whether or not the detector saw each frame."""
    numbered = [o for o in outputs if o.seq is not None]
    if len(numbered) < 2:
        return None
    first, last = min(numbered, key=lambda o: o.t), max(numbered, key=lambda o: o.t)
    if last.t <= first.t or last.seq is None or first.seq is None:
        return None
    return round((last.seq - first.seq) / (last.t - first.t), 2)


def stream_figures(outputs: Sequence[Output], start: float, end: float) -> list[dict[str, Any]]:
    """Per source, over ``[start, end]``: detections/s (model runs), outputs/s (runs and carries),
    frames decoded/s, ``rate_cv`` of its outputs in 1 s windows, and the p95 latency of its
    detections over the first and the last :data:`EDGE_S` (half the span each when shorter)."""
    span = end - start
    edge = min(EDGE_S, span / 2)
    inside = [o for o in outputs if start <= o.t <= end]
    out = []
    for source in sorted({o.source for o in inside}):
        mine = [o for o in inside if o.source == source]
        ran = [o for o in mine if o.inferred]
        out.append({
            "source": source,
            "detections_per_s": _rate(len(ran), span),
            "outputs_per_s": _rate(len(mine), span),
            "decoded_per_s": decoded_per_s(mine),
            "rate_cv": rate_cv([o.t for o in mine], start, end),
            "latency_p95_first_ms": _p95(o.latency_ms for o in ran if o.t < start + edge),
            "latency_p95_last_ms": _p95(o.latency_ms for o in ran if o.t >= end - edge),
        })  # fmt: skip
    return out


def figures(
    samples: Sequence[Sample], records: Records, dropped: dict[str, int], *, cores: float, target: float,
    warmup_s: float, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    """One run's figures over its measured span: from ``warmup_s`` after the first detector
    output to ``seconds`` after it (or the last output, if that came sooner)."""
    first, last = records.start, records.end
    if first is None or last is None:
        raise ValueError("no detections in the results: the pipeline did not run (see its stderr)")
    start, end = first + warmup_s, min(first + seconds, last)
    if end <= start:
        raise ValueError(f"nothing left after the {warmup_s:g} s warm-up (run {last - first:.1f} s)")
    cpu = cpu_fractions(samples, cores, start, end)
    kept = [s for s in samples if start <= s.t <= end]
    span = end - start
    inside = [o for o in records.outputs if start <= o.t <= end]
    ran = [o for o in inside if o.inferred]
    infer_ms = [o.infer_ms for o in ran if o.infer_ms is not None]
    described = [d for d in records.descriptions if start <= d.t <= end]
    streams = stream_figures(records.outputs, start, end)
    decoded = [s["decoded_per_s"] for s in streams]
    rate = cpu_rate(samples, start, end)
    return {
        "measured_s": round(span, 1),
        "cpu_mean": round(sum(cpu) / len(cpu), 3) if cpu else None,
        "cpu_p95": None if not cpu else round(percentile(cpu, 95) or 0.0, 3),
        "within_target": round(sum(f <= target + WITHIN_SLACK for f in cpu) / len(cpu), 3) if cpu else None,
        "cpu_s_per_s": None if rate is None else round(rate, 3),
        "detections_per_s": _rate(len(ran), span),
        "carries_per_s": _rate(len(inside) - len(ran), span),
        "frames_decoded_per_s": round(sum(d for d in decoded if d is not None), 2),
        "results_per_s": _rate(sum(start <= t <= end for t in records.written), span),
        "tokens_per_s": _rate(sum(d.new_tokens for d in described), span),
        "prompt_tokens_per_s": _rate(sum(d.prompt_tokens for d in described), span),
        "infer_ms_mean": round(statistics.fmean(infer_ms), 2) if infer_ms else None,
        "infer_ms_median": round(statistics.median(infer_ms), 2) if infer_ms else None,
        "streams": streams,
        "rate_cv": {s["source"]: s["rate_cv"] for s in streams},
        "dropped": dropped,
        "others_cpu_mean": others_fraction(samples, cores, start, end),
        "threads": round(statistics.median(s.threads for s in kept)) if kept else None,
        # RSS swings by tens of MB from one second to the next (malloc arenas of the decode and
        # model threads): each end is the mean over the same 10 s windows as the latencies.
        "rss_start_mb": _mean_rss(kept, start, start + min(EDGE_S, span / 2)),
        "rss_end_mb": _mean_rss(kept, end - min(EDGE_S, span / 2), end),
    }


def _mean_rss(samples: Sequence[Sample], start: float, end: float) -> float | None:
    values = [s.rss_mb for s in samples if start <= s.t <= end]
    return round(sum(values) / len(values), 1) if values else None


def ratio(measured: float | None, baseline: float | None) -> float | None:
    """measured / baseline, rounded; None when either is missing or the baseline is 0."""
    if measured is None or not baseline:
        return None
    return round(measured / baseline, 3)
