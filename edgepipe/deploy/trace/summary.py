"""What a traced run says (``edgepipe trace``): time per step with the slowest named, operators
per provider, fusions expected and found, buffers rebuilt during the run, where the time went,
and energy per frame.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from edgepipe.core.spans import NEXT_ITEM, STEPS
from edgepipe.deploy.power.meter import energy_json
from edgepipe.deploy.trace.ort import fusions, operator_ms_within, operators, providers
from edgepipe.deploy.trace.traced import Allocation, TraceRun
from edgepipe.graph.spec import NodeKind

TOP_OPS = 8


def summarize(run: TraceRun) -> dict[str, Any]:
    report = run.report
    wall_ms = report.duration_s * 1000
    steps = _steps(run, wall_ms)
    work = [s for s in steps if s["step"] != STEPS[NEXT_ITEM]]
    slowest = max(work, key=lambda s: s["total_ms"], default=None)
    owners = model_owners(run.allocations)
    models = []
    # Operators from the first item on: a model's warm-up run at load is in the Chrome trace only.
    firsts = [log.starts_ns[0] for log in run.spans.values() if len(log)]
    since_ns = min(firsts) + run.epoch_offset_ns if firsts else 0
    for p in run.profiles:
        ops = operators(p, since_ns)
        op_ms = sum(r["total_ms"] for r in ops)
        owner = owners.get(p.model_file.name if p.model_file else p.model)
        node_ms = sum(s["total_ms"] for s in work if s["node"] == owner)
        # Of the node's time, what its model's runs inside its own calls took: never more than
        # all of it (a run cut by the start of the counting, or by the stop, lies in no call).
        inside_ms = operator_ms_within(p, _windows(run, owner)) if owner else 0.0
        models.append({
            "model": p.model, "node": owner, "operator_runs": sum(r["runs"] for r in ops),
            "operator_ms": round(op_ms, 1),
            "providers_ms": {k: round(v, 1) for k, v in providers(p, since_ns).items()},
            "operators": [{**r, "total_ms": round(r["total_ms"], 2)} for r in ops[:TOP_OPS]],
            "fusions": fusions(p),
            "share_of_node": round(inside_ms / node_ms, 3) if node_ms else None,
        })  # fmt: skip
    buffers = buffer_uses(run.allocations)
    frames = sum(n.items_out for n in report.stats.nodes if n.kind == NodeKind.SOURCE.value)
    problems = [f"{b['owner']}: {b['buffer']} rebuilt {b['rebuilt']} time(s) during the run" for b in buffers
                if b["rebuilt"]]  # fmt: skip
    problems += [f"{m['model']}: expected fusion missing: {f['fusion']}" for m in models for f in m["fusions"]
                 if not f["ok"]]  # fmt: skip
    problems += [f"{n.node_id}: {n.errors} error(s)" for n in report.stats.nodes if n.errors]
    return {
        "pipeline": run.graph.name,
        "duration_s": round(report.duration_s, 3),
        "stopped_by": report.stopped_by,
        "frames": frames,
        "steps": steps,
        "slowest_step": None if slowest is None else f"{slowest['node']} {slowest['step']}",
        "models": models,
        "buffers": buffers,
        "where_time_went": _where(work, models, wall_ms),
        "energy": energy_json(run.meter, run.energies, frames, "frame"),
        "problems": problems,
        "notes": run.notes,
    }


def _steps(run: TraceRun, wall_ms: float) -> list[dict[str, Any]]:
    rows = []
    for spec in run.graph.nodes:
        log = run.spans.get(spec.node_id)
        if log is None:
            continue
        by_step: defaultdict[int, list[int]] = defaultdict(list)
        for dur, step in zip(log.durations_ns, log.steps, strict=True):
            by_step[step].append(dur)
        for step, durs in sorted(by_step.items()):
            durs.sort()
            total = sum(durs) / 1e6
            rows.append({
                "node": spec.node_id, "step": STEPS[step], "calls": len(durs), "total_ms": round(total, 2),
                "mean_ms": round(total / len(durs), 3),
                "p95_ms": round(durs[int(0.95 * (len(durs) - 1))] / 1e6, 3),
                "max_ms": round(durs[-1] / 1e6, 3), "share": round(total / wall_ms, 3) if wall_ms else 0.0,
                "dropped": log.dropped,
            })  # fmt: skip
    return rows


def _windows(run: TraceRun, node_id: str) -> list[tuple[int, int]]:
    """The node's work calls (not a source's waits), as wall-clock ``(start, end)`` ns."""
    log = run.spans.get(node_id)
    if log is None:
        return []
    offset = run.epoch_offset_ns
    spans = zip(log.starts_ns, log.durations_ns, log.steps, strict=True)
    return [(t0 + offset, t0 + dur + offset) for t0, dur, step in spans if step != NEXT_ITEM]


def model_owners(allocations: list[Allocation]) -> dict[str, str]:
    """Model file name -> the node whose weights reservation names it."""
    out = {}
    for a in allocations:
        if a.what.startswith("model weights ("):
            out[a.what[len("model weights (") :].split(",")[0].split(")")[0]] = a.owner
    return out


def buffer_uses(allocations: list[Allocation]) -> list[dict[str, Any]]:
    """Long-lived buffers (not weights) per owner: how often each was reserved, and how many of
    those were rebuilds (a reservation after the first, once the run had started)."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for a in allocations:
        kind = a.what.split(" (")[0]
        if kind == "model weights":
            continue
        row = seen.setdefault((a.owner, kind), {"owner": a.owner, "buffer": kind, "reservations": 0,
                                                "during_run": 0, "rebuilt": 0, "last": a.what})  # fmt: skip
        if row["reservations"] and a.after_start:
            row["rebuilt"] += 1
        row["reservations"] += 1
        row["during_run"] += a.after_start
        row["last"] = a.what
    return list(seen.values())


def _where(work: list[dict[str, Any]], models: list[dict[str, Any]], wall_ms: float) -> list[str]:
    lines = []
    for s in sorted(work, key=lambda s: -s["total_ms"])[:3]:
        lines.append(
            f"{s['node']} {s['step']}: {s['total_ms']:.0f} ms in {s['calls']} calls "
            f"({s['share']:.0%} of the {wall_ms / 1000:.1f} s run, {s['mean_ms']:.2f} ms each)"
        )
    for m in models:
        if not m["operators"]:
            continue
        top = ", ".join(f"{r['op']} {r['total_ms'] / m['operator_ms']:.0%}" for r in m["operators"][:2])
        inside = (
            f"{m['share_of_node']:.0%} of the time in node {m['node']}" if m["share_of_node"] else "its runs"
        )
        lines.append(f"model {m['model']}: {m['operator_ms']:.0f} ms in operators ({inside}); {top}")
    return lines
