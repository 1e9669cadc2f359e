"""The Chrome trace-event JSON of a traced run (Perfetto and ``chrome://tracing`` open it).

``{"traceEvents": [...]}`` with complete events (``"ph": "X"``, ``ts`` and ``dur`` in
microseconds from the start of the trace): process 1 holds one thread per node (its calls,
``prepare``/``process`` steps, a source's waits for its next item); each ONNX Runtime session is
a process of its own, its operator and run events placed on the same clock (the profile's start
is wall-clock time, and the spans' ``perf_counter_ns`` are moved onto it by one offset).
"""

from __future__ import annotations

from typing import Any

from edgepipe.core.spans import STEPS
from edgepipe.deploy.trace.traced import TraceRun

NODES_PID = 1
_ORT_ARGS = ("op_name", "provider", "node_index")


def chrome_trace(run: TraceRun) -> dict[str, Any]:
    starts = [log.starts_ns[0] + run.epoch_offset_ns for log in run.spans.values() if len(log)]
    starts += [p.start_ns + int(e["ts"]) * 1000 for p in run.profiles for e in p.events[:1] if "ts" in e]
    origin_ns = min(starts) if starts else 0
    events: list[dict[str, Any]] = [_meta("process_name", NODES_PID, 0, f"edgepipe: {run.graph.name}")]
    for tid, spec in enumerate(run.graph.nodes, start=1):
        events.append(_meta("thread_name", NODES_PID, tid, spec.node_id))
        events.append({"name": "thread_sort_index", "ph": "M", "pid": NODES_PID, "tid": tid,
                       "args": {"sort_index": tid}})  # fmt: skip
        log = run.spans.get(spec.node_id)
        if log is None:
            continue
        base = run.epoch_offset_ns - origin_ns
        for t0, dur, step in zip(log.starts_ns, log.durations_ns, log.steps, strict=True):
            events.append({"name": f"{spec.node_id} {STEPS[step]}", "cat": "node", "ph": "X",
                           "ts": (t0 + base) / 1000, "dur": dur / 1000, "pid": NODES_PID, "tid": tid,
                           "args": {"node": spec.node_id, "step": STEPS[step]}})  # fmt: skip
    for pid, profile in enumerate(run.profiles, start=NODES_PID + 1):
        events.append(_meta("process_name", pid, 0, f"onnxruntime: {profile.model}"))
        tids: dict[Any, int] = {}
        base_us = (profile.start_ns - origin_ns) / 1000
        for e in profile.events:
            if e.get("ph") != "X" or "ts" not in e:
                continue
            tid = tids.setdefault(e.get("tid"), len(tids) + 1)
            args = {k: e["args"][k] for k in _ORT_ARGS if k in e.get("args", {})}
            name = args.get("op_name", e.get("name", "?"))
            events.append({"name": name, "cat": e.get("cat", "ort"), "ph": "X", "ts": base_us + e["ts"],
                           "dur": max(0, e.get("dur", 0)), "pid": pid, "tid": tid, "args": args})  # fmt: skip
        for original, tid in tids.items():
            events.append(_meta("thread_name", pid, tid, f"onnxruntime thread {original}"))
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
