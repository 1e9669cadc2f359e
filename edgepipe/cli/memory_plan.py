"""``edgepipe run FILE --plan``: what the pipeline would reserve, against the budget, printed
without running it (see :mod:`edgepipe.runtime.memory_plan`).

Exit codes (:mod:`edgepipe.cli.exits`), as ``edgepipe plan FILE``'s: 0 it fits; 1 (problems
found) it does not (the first buffer past the budget is named, on stderr too, with what to
change), or a node's part could not be planned (a model that is missing).
"""

from __future__ import annotations

import sys
from typing import TextIO

from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_PROBLEMS
from edgepipe.cli.failures import error
from edgepipe.graph.check import Graph
from edgepipe.planning.memory import format_bytes
from edgepipe.runtime.memory_plan import PlanReport, plan_graph


def main(graph: Graph, out: TextIO | None = None, *, auto_instances: int = 1) -> int:
    """Plan ``graph``, print the plan (on stdout by default), and return the exit code.
    ``auto_instances``: calls in flight of ``instances="auto"`` nodes in the run planned."""
    report = plan_graph(graph, auto_instances=auto_instances)
    print_plan(report, out)
    if not report.fits:
        refusal = report.refusal
        error(str(refusal) if refusal is not None else _verdict(report))
        return EXIT_PROBLEMS
    if report.failures:
        nodes = ", ".join(f"'{node_id}'" for node_id, _ in report.failures)
        error(f"the plan is incomplete: {nodes} could not be planned")
        return EXIT_FAILED
    return EXIT_OK


def _rows(report: PlanReport) -> list[tuple[str, str, str]]:
    """(node, what, size) in graph order; within a node, in the order they would be reserved."""
    rows: list[tuple[int, int, tuple[str, str, str]]] = []
    order = list(report.nodes)

    def rank(owner: str) -> int:
        return order.index(owner) if owner in order else len(order)

    for seq, r in enumerate(report.entries):
        size = format_bytes(r.nbytes) + (f" on {r.device}" if r.device else "")
        rows.append((rank(r.owner), seq, (r.owner, r.what, size)))
    later = len(report.entries)
    for seq, u in enumerate(report.unknowns, later):
        rows.append((rank(u.owner), seq, (u.owner, u.what, f"unknown ({u.why})")))
    later += len(report.unknowns)
    for seq, (node_id, why) in enumerate(report.failures, later):
        rows.append((rank(node_id), seq, (node_id, "cannot plan", why)))
    return [row for _, _, row in sorted(rows)]


def _verdict(report: PlanReport) -> str:
    budget = report.budget_bytes
    crossing = report.crossing
    if budget is None:
        return "fits: no budget (this system does not say how much memory it has)"
    if crossing is None:
        left = f"{format_bytes(budget - report.host_bytes)} of the budget left"
        if report.failures:
            return f"fits so far ({left}), but {len(report.failures)} node(s) could not be planned"
        return f"fits: {left}"
    held = 0
    for r in report.entries:
        if r is crossing:
            break
        held += 0 if r.device else r.nbytes
    return (
        f"does not fit: {crossing.owner}: {crossing.what} needs {format_bytes(crossing.nbytes)}, "
        f"{format_bytes(max(0, budget - held))} of the budget left"
    )


def print_plan(report: PlanReport, out: TextIO | None = None) -> None:
    """The plan as a table: node, what, size; the totals; fits or not (on stdout by default)."""
    out = out or sys.stdout
    rows = _rows(report)
    print(f"memory plan of '{report.pipeline}' (nothing started, nothing allocated):", file=out)
    if rows:
        header = ("node", "what", "size")
        width_node = max(len(r[0]) for r in [header, *rows])
        width_what = max(len(r[1]) for r in [header, *rows])
        for node_id, what, size in [header, *rows]:
            print(f"  {node_id:<{width_node}}  {what:<{width_what}}  {size}", file=out)
    else:
        print("  no node says it reserves memory", file=out)
    total = f"total: {format_bytes(report.host_bytes)}"
    if report.budget_bytes is not None:
        total += (
            f" of a {format_bytes(report.budget_bytes)} budget ({report.budget_frac:.0%} of the "
            f"{format_bytes(report.limit_bytes or 0)} this process may use; EDGEPIPE_MEMORY_FRAC)"
        )
    print(total, file=out)
    for device, nbytes in report.device_bytes().items():
        print(f"on {device}: {format_bytes(nbytes)} (the device's own memory, outside the budget)", file=out)
    if report.unknowns:
        print(f"{len(report.unknowns)} buffer(s) of unknown size are not in the total", file=out)
    print(_verdict(report), file=out)
