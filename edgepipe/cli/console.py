"""The ``--stats`` table: live while a pipeline runs (on a terminal), and a summary at exit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.constrain import Constrain
from rich.live import Live
from rich.table import Table
from rich.text import Text

from edgepipe.core.channel import ChannelStats
from edgepipe.runtime.engine import Runtime, Snapshot, Watcher
from edgepipe.wire.redact import redact_text

REFRESH_S = 1.0
WIDTH = 80
"""The width the tables are built to fit: the default terminal's, and the summary's where stderr
is not a terminal (a log file)."""
LEDGER_WIDTH = 80
"""The CPU ledger's table keeps to this many columns, whatever the width of the rest."""
_NODE_MAX = 16
"""A longer node id wraps within its cell rather than widening every row."""


def _ms(value: float | None) -> str:
    """Three significant figures at most: 0.04, 5.89, 95.9, 1234."""
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _count(value: int) -> str:
    """Exact up to 9,999,999 (days at 30 frames/s), then in millions."""
    return str(value) if value < 10_000_000 else f"{value / 1e6:.1f}M"


def stats_view(snap: Snapshot, title: str, previous: Snapshot | None = None) -> Constrain:
    """The table, each node's gauges under it (one line per node that has any) and the
    scheduler's line: what ``--stats`` draws, live and at exit. Fits :data:`WIDTH` columns."""
    parts: list[Any] = [stats_table(snap, title, previous)]
    info = Table.grid(padding=(0, 2))
    info.add_column(max_width=_NODE_MAX, overflow="fold")
    info.add_column()
    for node in snap.nodes:
        text = " ".join(f"{k}={v}" for k, v in node_info(snap, node.node_id).items())
        if text:
            info.add_row(redact_text(node.node_id), redact_text(text))
    if info.row_count:
        parts.append(info)
    if snap.sched is not None:
        parts.append(Text(sched_line(snap.sched)))
        ledger = snap.sched.get("cpu_ledger")
        if ledger:
            # Live: the last window; the summary (no previous): the whole run.
            parts += [Text(ledger_line(ledger, whole_run=previous is None)),
                      Constrain(ledger_table(ledger, whole_run=previous is None), LEDGER_WIDTH)]  # fmt: skip
    return Constrain(Group(*parts), WIDTH)  # on a wider terminal too: one shape everywhere


def stats_table(snap: Snapshot, title: str, previous: Snapshot | None = None) -> Table:
    """One row per node (with its inbox's depth and drops); rates over the last interval.

    A source has no ``in`` and a sink no ``out`` (shown ``-``): that is how the kind shows. A
    node's state (when not running) and its errors (when any) are on its line under the table
    (:func:`node_info`), so that the columns fit :data:`WIDTH`."""
    before = {n.node_id: n for n in previous.nodes} if previous else {}
    dt = snap.t_s - previous.t_s if previous else snap.t_s
    # A detector's carried frames make no model run: the columns say they are left out.
    latency = (
        "p50/p95/p99: ms a call, carried frames apart"
        if any(n.light for n in snap.nodes)
        else "latency p50/p95/p99 in ms"
    )
    table = Table(title=f"{title}  ({snap.t_s:.1f} s; {latency})", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True,
                  padding=0)  # fmt: skip
    table.add_column("node", min_width=min(_NODE_MAX, max((len(n.node_id) for n in snap.nodes), default=4)),
                     max_width=_NODE_MAX, overflow="fold")  # fmt: skip
    for column in ("in", "out", "out/s", "p50", "p95", "p99", "busy"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("queue", max_width=14)  # a second policy goes under the first
    table.add_column("drop", justify="right", no_wrap=True)
    for node in snap.nodes:
        prior = before.get(node.node_id)
        done = node.items_out - (prior.items_out if prior else 0)
        rate = done / dt if dt > 0 else 0.0
        lanes = snap.inbox(node.node_id)
        table.add_row(
            redact_text(node.node_id),  # the user's text: a node may be named by its URL
            "-" if node.kind == "source" else _count(node.items_in),
            "-" if node.kind == "sink" else _count(node.items_out),
            "-" if node.kind == "sink" else f"{rate:.1f}",
            _ms(node.latency_p50_ms),
            _ms(node.latency_p95_ms),
            _ms(node.latency_p99_ms),
            f"{node.busy_frac:.0%}",
            _queue(lanes),
            _count(sum(c.dropped for c in lanes)) if lanes else "-",
        )
    return table


def node_info(snap: Snapshot, node_id: str) -> dict[str, Any]:
    """A node's state when it is not running (restarting, half-open ...), its errors, its calls
    in flight (when it runs several), its ``runs`` and the light items it ``carried`` without a
    call (a detector's tracked frames: the table's percentiles are the runs' alone), what it
    reports about itself (its gauges), and what was turned away before its code saw it:
    ``skipped`` (circuit open), ``shed`` (by the governor), ``aged`` (past max_age_s)."""
    node = snap.node(node_id)
    lanes = snap.inbox(node_id)
    info: dict[str, Any] = {}
    if node.state not in ("running", "idle", "done"):
        info["state"] = node.state
    if node.errors:
        info["errors"] = node.errors
    if node.instances > 1:  # several calls in flight (edgepipe.runtime.inflight.flight): running / most
        info["calls"] = f"{node.in_flight}/{node.instances}"
    if node.light:  # a detector's frames the tracker carried: no model run, their own figures
        info["runs"] = _count(node.calls)
        info["carried"] = _count(node.light)
        info["carried_p50_ms"] = _ms(node.light_p50_ms)
        info["carried_p95_ms"] = _ms(node.light_p95_ms)
    info.update(node.gauges)
    limit = snap.sched.get("limits", {}).get(node_id) if snap.sched else None
    if limit is not None:  # what holds a model node's rate (edgepipe.sched.limits)
        info["limit"] = limit
    if node.skipped:
        info["skipped"] = node.skipped
    shed, aged = sum(c.shed for c in lanes), sum(c.aged for c in lanes)
    if shed:
        info["shed"] = shed
    if aged:
        info["aged"] = aged
    return info


def sched_line(sched: dict[str, Any]) -> str:
    """The scheduler's figures in one line: CPU against the target, heat, the governor."""
    cpu = sched.get("cpu")
    parts = [
        f"CPU {'-' if cpu is None else f'{cpu:.0%}'} of {sched['cores']:g} core(s), "
        f"target {sched['target_now']:.0%}" + ("" if sched["governed"] else " (ungoverned)")
    ]
    if sched.get("temp_c") is not None:
        parts.append(f"{sched['temp_c']:.0f} °C")
    if sched.get("accelerator") is not None:
        parts.append(f"accelerator {sched['accelerator']:.0%}")
    if sched["governed"]:
        slowed = [f"{k['node']} {k['setting']}" for k in sched["knobs"] if k["level"]]
        parts.append(
            f"governor level {sched['level']}/{sched['rungs']}" + (f": {', '.join(slowed)}" if slowed else "")
        )
    busy = sched.get("heavy_busy_s", {})
    if "detect" in busy and "lm" in busy:
        parts.append(f"detect/LM overlap {sched['detect_lm_overlap_s']:.1f} s")
    return redact_text(" · ".join(parts))  # knobs are named by their nodes


def _cores_by_kind(ledger: dict[str, Any], whole_run: bool) -> tuple[dict[str, float], float]:
    """Cores by kind of work and the process's, over the last window or the whole run."""
    if not whole_run:
        return ledger["kinds_cores"], ledger["process_cores"]
    elapsed = ledger["elapsed_s"]
    if elapsed <= 0:
        return {}, 0.0
    return {k: s / elapsed for k, s in ledger["kinds_s"].items()}, ledger["process_s"] / elapsed


def ledger_line(ledger: dict[str, Any], *, whole_run: bool = False) -> str:
    """Where the CPU goes, in cores, by kind of work (the CPU ledger); what is left is overhead."""
    kinds, process = _cores_by_kind(ledger, whole_run)
    shown = " ".join(
        f"{kind}={cores:.2f}" for kind, cores in kinds.items() if round(cores, 2) or kind == "overhead"
    )
    return f"CPU {process:.2f} cores{' (run mean)' if whole_run else ''}: {shown}"


def ledger_table(ledger: dict[str, Any], *, whole_run: bool = False) -> Table:
    """Per node: its cores, CPU and wall milliseconds per item (wall above CPU: waiting for a
    core, or for something else), and its cores by kind. Fits :data:`LEDGER_WIDTH` columns."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("node", max_width=_NODE_MAX, overflow="fold")
    for column in ("cores", "cpu/item", "wall/item"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("by kind (cores)", overflow="fold")
    elapsed = ledger["elapsed_s"]
    prefix = "run_" if whole_run else ""
    for node_id, node in ledger["nodes"].items():
        if whole_run:
            kinds = {k: s / elapsed for k, s in node["kinds_s"].items()} if elapsed > 0 else {}
        else:
            kinds = node["kinds_cores"]
        table.add_row(
            redact_text(node_id),
            f"{sum(kinds.values()):.2f}",
            _ms(node[prefix + "cpu_ms_per_item"]),
            _ms(node[prefix + "wall_ms_per_item"]),
            " ".join(f"{kind}={cores:.2f}" for kind, cores in kinds.items() if round(cores, 2)),
        )
    return table


def _queue(lanes: tuple[ChannelStats, ...]) -> str:
    """Depth/size of a node's inbox, summed over its lanes of each policy: a line a policy."""
    if not lanes:
        return "-"
    by_policy: dict[str, tuple[int, int]] = {}
    for c in lanes:
        depth, size = by_policy.get(c.policy, (0, 0))
        by_policy[c.policy] = (depth + c.depth, size + c.size)
    return "\n".join(f"{depth}/{size} {policy}" for policy, (depth, size) in by_policy.items())


def live_stats(title: str) -> Watcher:
    """A runtime watcher that redraws the table every second while stderr is a terminal."""

    async def watch(runtime: Runtime) -> None:
        console = Console(stderr=True)
        if not console.is_terminal:
            return
        previous = runtime.snapshot()
        live = Live(stats_view(previous, title), console=console, refresh_per_second=2, transient=True)
        with live, _logs_above(live):
            while True:
                await asyncio.sleep(REFRESH_S)
                snap = runtime.snapshot()
                live.update(stats_view(snap, title, previous))
                previous = snap

    return watch


@contextlib.contextmanager
def _logs_above(live: Live) -> Iterator[None]:
    """Send log lines through the live display, so they scroll above the table instead of
    tearing it (the log handlers hold the real stderr, which Live's redirect cannot see)."""
    swapped = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.__stderr__:
            swapped.append((handler, handler.setStream(sys.stderr)))  # Live's proxy, while live
    try:
        yield
    finally:
        for handler, stream in swapped:
            handler.setStream(stream)


def print_summary(snap: Snapshot, title: str) -> None:
    """The whole-run table, to stderr (stdout may carry ``--results -``)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(file=sys.stderr, width=WIDTH)  # a log file has no width of its own
    console.print(stats_view(snap, f"{title}: summary"))
