"""The summary of ``edgepipe trace`` for people: tables and lines on stdout."""

from __future__ import annotations

from typing import Any

from edgepipe.deploy.output import console, table
from edgepipe.deploy.power.meter import energy_lines


def print_summary(s: dict[str, Any]) -> None:
    out = console()
    wrote = f"wrote {s['trace_file']} (open it in ui.perfetto.dev)" if s["trace_file"] else "no trace written"
    run = f"{s['duration_s']:.1f} s ({s['stopped_by']}), {s['frames']} frames"
    out.print(f"trace of '{s['pipeline']}': {run}; {wrote}")
    rows: list[tuple[Any, ...]] = [
        (r["node"], r["step"], r["calls"], f"{r['total_ms']:.1f}", f"{r['mean_ms']:.2f}",
         f"{r['p95_ms']:.2f}", f"{r['max_ms']:.2f}", f"{r['share']:.0%}")
        for r in s["steps"]
    ]  # fmt: skip
    cols: tuple[str, ...] = ("node", "step", "calls", "total ms", "mean ms", "p95 ms", "max ms", "of run")
    out.print(table("time per step", cols, rows, right=cols[2:]))
    out.print(f"slowest step: {s['slowest_step'] or 'none (no calls)'}")
    for m in s["models"]:
        providers = ", ".join(f"{p} {ms:.0f} ms" for p, ms in m["providers_ms"].items()) or "no operator ran"
        out.print(
            f"\nmodel {m['model']} (node {m['node'] or '?'}): {m['operator_runs']} operator runs; {providers}"
        )
        rows = [(r["op"], r["provider"], r["runs"], f"{r['total_ms']:.1f}") for r in m["operators"]]
        out.print(table("operators (slowest first)", ("op", "provider", "runs", "total ms"), rows,
                        right=("runs", "total ms")))  # fmt: skip
        rows = [(f["fusion"], "yes" if f["expected"] else "no", ", ".join(f["present"]) or "-",
                 "ok" if f["ok"] else "MISSING", f["note"]) for f in m["fusions"]]  # fmt: skip
        out.print(table("fusions", ("fusion", "expected", "present", "", "note"), rows))
    rows = [(b["owner"], b["buffer"], b["reservations"], b["during_run"], b["rebuilt"]) for b in s["buffers"]]
    if rows:
        cols = ("owner", "buffer", "reserved", "during run", "rebuilt")
        out.print(table("buffers that live for the whole run", cols, rows, right=cols[2:]))
    out.print("where the time went:")
    for line in s["where_time_went"]:
        out.print(f"  {line}")
    for line in energy_lines(s["energy"], "frame"):
        out.print(line)
    for note in s["notes"]:
        out.print(f"note: {note}")
    out.print("problems: " + ("none" if not s["problems"] else ""))
    for p in s["problems"]:
        out.print(f"  {p}")
