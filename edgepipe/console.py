"""The ``--stats`` table: live while a pipeline runs (on a terminal), and a summary at exit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from edgepipe.core.channel import ChannelStats
from edgepipe.core.runtime import Runtime, Snapshot, Watcher

REFRESH_S = 1.0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def stats_table(snap: Snapshot, title: str, previous: Snapshot | None = None) -> Table:
    """One row per node (with its inbox's depth and drops); rates over the last interval."""
    before = {n.node_id: n for n in previous.nodes} if previous else {}
    dt = snap.t_s - previous.t_s if previous else snap.t_s
    table = Table(title=f"{title}  ({snap.t_s:.1f} s)", title_justify="left", expand=False)
    for column in ("node", "kind", "state", "in", "out", "out/s", "err", "p50 ms", "p95 ms",
                   "p99 ms", "busy", "queue", "dropped", "info"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("node", "kind", "state") else "right")
    for node in snap.nodes:
        prior = before.get(node.node_id)
        done = node.items_out - (prior.items_out if prior else 0)
        rate = done / dt if dt > 0 else 0.0
        lanes = snap.inbox(node.node_id)
        info = dict(node.gauges)
        if node.skipped:
            info["skipped"] = node.skipped  # circuit open: items dropped without a call
        shed, aged = sum(c.shed for c in lanes), sum(c.aged for c in lanes)
        if shed:
            info["shed"] = shed  # turned away by the governor
        if aged:
            info["aged"] = aged  # older than the lane's max_age_s
        table.add_row(
            node.node_id,
            node.kind,
            node.state,
            str(node.items_in),
            str(node.items_out),
            f"{rate:.1f}",
            str(node.errors),
            _ms(node.latency_p50_ms),
            _ms(node.latency_p95_ms),
            _ms(node.latency_p99_ms),
            f"{node.busy_frac:.0%}",
            _queue(lanes),
            str(sum(c.dropped for c in lanes)) if lanes else "-",
            " ".join(f"{k}={v}" for k, v in info.items()),
        )
    if snap.sched is not None:
        table.caption = sched_line(snap.sched)
        table.caption_justify = "left"
    return table


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
    return " · ".join(parts)


def _queue(lanes: tuple[ChannelStats, ...]) -> str:
    """Depth/size of a node's inbox, summed over its lanes of each policy."""
    if not lanes:
        return "-"
    by_policy: dict[str, tuple[int, int]] = {}
    for c in lanes:
        depth, size = by_policy.get(c.policy, (0, 0))
        by_policy[c.policy] = (depth + c.depth, size + c.size)
    return " ".join(f"{depth}/{size} {policy}" for policy, (depth, size) in by_policy.items())


def live_stats(title: str) -> Watcher:
    """A runtime watcher that redraws the table every second while stderr is a terminal."""

    async def watch(runtime: Runtime) -> None:
        console = Console(stderr=True)
        if not console.is_terminal:
            return
        previous = runtime.snapshot()
        live = Live(stats_table(previous, title), console=console, refresh_per_second=2, transient=True)
        with live, _logs_above(live):
            while True:
                await asyncio.sleep(REFRESH_S)
                snap = runtime.snapshot()
                live.update(stats_table(snap, title, previous))
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
        console = Console(file=sys.stderr, width=160)  # a log file has no width to fit
    console.print(stats_table(snap, f"{title}: summary"))
