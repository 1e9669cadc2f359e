"""ONNX Runtime's profiles in a trace: which operators ran on which provider, for how long, and
whether the fusions expected of the model happened.

A profile (``SessionOptions.enable_profiling``) is a JSON list of Chrome-trace events: ``Session``
events (loading, initialization, each run) and one ``Node`` event per operator run, named
``<node>_kernel_time`` with ``args.op_name`` and ``args.provider``, ``ts`` in microseconds from
the profiler's start, whose wall-clock time ``get_profiling_start_time_ns()`` gives.

The operators that run are those of the *optimized* graph, so a fusion shows as its fused
operator (``FusedConv``, ``LayerNormalization`` …) in the profile. What is expected comes from
the model file's own operators: a ``Conv`` followed by an activation fuses into ``FusedConv`` on
the CPU; a decomposed layer norm into ``LayerNormalization`` or its ``Skip``/``Simplified`` forms,
where it is spelled as ONNX Runtime's fusion looks for it: the square as ``Pow(x, 2)``
(``ReduceMean-Sub-Pow-ReduceMean-Add-Sqrt-Div``, or RMSNorm's ``Pow-ReduceMean-Add-Sqrt-Div``, as
torch exports them); one that squares with ``Mul(x, x)`` is not fused by any optimization level,
so it is reported as separate kernels, not as a fusion that failed; ``Erf`` GELU into
``Gelu``/``BiasGelu``/``FastGelu``. Attention
(``Attention``, ``MultiHeadAttention``, ``GroupQueryAttention``) is fused at load time only for
BERT-like graphs: a decoder gets it from its export or ``onnxruntime.transformers``' optimizer,
so its absence is reported, not counted as a problem.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgepipe.infer import onnxfile

ACTIVATIONS = {"Relu", "LeakyRelu", "Sigmoid", "Clip", "HardSigmoid", "Tanh", "HardSwish"}
NORM_SPELLED = {"ReduceMean", "Pow", "Sqrt"}
"""A decomposed layer norm or RMSNorm as ONNX Runtime's fusions match it: the square is a Pow."""
LAYER_NORM_OPS = {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                  "SkipSimplifiedLayerNormalization"}  # fmt: skip
GELU_OPS = {"Gelu", "BiasGelu", "FastGelu", "QuickGelu"}
ATTENTION_OPS = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention"}
FUSED_OPS = {
    "FusedConv",
    "FusedMatMul",
    "FusedGemm",
    "MatMulNBits",
    *LAYER_NORM_OPS,
    *GELU_OPS,
    *ATTENTION_OPS,
}


@dataclass
class Profile:
    """One session's profile: its events on the wall clock."""

    model: str
    path: Path
    start_ns: int
    """Wall-clock (``time.time_ns``) time of the profile's ``ts = 0``."""
    events: list[dict[str, Any]]
    model_file: Path | None = None
    source_ops: set[str] = field(default_factory=set)
    """Operators of the model file (before optimization); empty when it could not be read."""
    squares_with_mul: bool = False
    """The model file has a ``Mul(x, x)`` feeding a ``ReduceMean``: a norm spelled so that no
    ONNX Runtime fusion matches it."""

    @property
    def op_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("cat") == "Node" and "op_name" in e.get("args", {})]


def read_profile(model: str, path: Path, start_ns: int, model_file: Path | None) -> Profile:
    """The profile ONNX Runtime wrote at ``path`` (``end_profiling()``'s return)."""
    events = json.loads(Path(path).read_text())
    ops: set[str] = set()
    squares = False
    if model_file is not None:
        try:
            nodes = onnxfile.graph_nodes(model_file.read_bytes())
        except (OSError, onnxfile.OnnxFormatError, KeyError):
            nodes = []
        ops = {n.op_type for n in nodes}
        squared = {n.outputs[0] for n in nodes if n.op_type == "Mul" and n.outputs and _same(n.inputs)}
        squares = any(n.op_type == "ReduceMean" and n.inputs[:1] and n.inputs[0] in squared for n in nodes)
    kept = [e for e in events if isinstance(e, dict)]
    return Profile(model, Path(path), start_ns, kept, model_file, ops, squares)


def _same(inputs: tuple[str, ...]) -> bool:
    """A node's inputs are one tensor twice (``Mul(x, x)``)."""
    return len(inputs) == 2 and inputs[0] == inputs[1]


def model_runs(profile: Profile) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of the session (its ``model_run`` events), wall-clock ns, in
    order."""
    return sorted(
        (_wall(profile, e["ts"]), _wall(profile, float(e["ts"]) + float(e.get("dur", 0))))
        for e in profile.events
        if e.get("cat") == "Session" and e.get("name") == "model_run" and "ts" in e
    )


def operators(profile: Profile, since_ns: int = 0) -> list[dict[str, Any]]:
    """Per (operator, provider): runs and total time, slowest first; only the operators of the
    runs that started at or after ``since_ns`` (wall clock: leave out a warm-up run made at load,
    whole: a warm-up still running at ``since_ns`` is no part of the pipeline's work)."""
    runs: Counter[tuple[str, str]] = Counter()
    total_us: defaultdict[tuple[str, str], int] = defaultdict(int)
    for e, (run_start, _) in _with_runs(profile):
        if run_start < since_ns:
            continue
        key = (e["args"]["op_name"], e["args"].get("provider", "?"))
        runs[key] += 1
        total_us[key] += max(0, int(e.get("dur", 0)))
    rows = [{"op": op, "provider": prov, "runs": runs[(op, prov)], "total_ms": total_us[(op, prov)] / 1000}
            for op, prov in runs]  # fmt: skip
    return sorted(rows, key=lambda r: -r["total_ms"])


def operator_ms_within(profile: Profile, windows: list[tuple[int, int]], slack_ns: int = 1_000_000) -> float:
    """Milliseconds of operator time of the runs that lie inside one of ``windows`` (wall-clock
    ``(start, end)`` ns: a node's calls), give or take ``slack_ns`` for the two clocks: what of
    a node's time its model's operators took."""
    starts = sorted(windows)
    keys = [w[0] for w in starts]
    total_us = 0
    for e, (run_start, run_end) in _with_runs(profile):
        i = bisect_right(keys, run_start + slack_ns) - 1
        if i >= 0 and run_end <= starts[i][1] + slack_ns:
            total_us += max(0, int(e.get("dur", 0)))
    return total_us / 1000


def _wall(profile: Profile, ts_us: Any) -> int:
    return profile.start_ns + int(float(ts_us) * 1000)


def _with_runs(profile: Profile) -> list[tuple[dict[str, Any], tuple[int, int]]]:
    """Each operator event with the ``(start, end)`` of the run it belongs to (its own where no
    ``model_run`` holds it)."""
    runs = model_runs(profile)
    starts = [r[0] for r in runs]
    out = []
    for e in profile.op_events:
        t = _wall(profile, e.get("ts", 0))
        i = bisect_right(starts, t) - 1
        if i >= 0 and t <= runs[i][1]:
            out.append((e, runs[i]))
        else:
            out.append((e, (t, _wall(profile, float(e.get("ts", 0)) + float(e.get("dur", 0))))))
    return out


def providers(profile: Profile, since_ns: int = 0) -> dict[str, float]:
    """Milliseconds of operator time per provider (since ``since_ns``, as :func:`operators`)."""
    out: defaultdict[str, float] = defaultdict(float)
    for row in operators(profile, since_ns):
        out[row["provider"]] += row["total_ms"]
    return dict(out)


def fusions(profile: Profile) -> list[dict[str, Any]]:
    """Each fusion expected of this model (from its own operators), and whether it ran:
    ``{"fusion", "expected", "present": [ops], "ok", "note"}``."""
    ran = {e["args"]["op_name"] for e in profile.op_events}
    cpu = any(e["args"].get("provider") == "CPUExecutionProvider" for e in profile.op_events)
    src = profile.source_ops
    checks: list[tuple[str, bool, set[str], str]] = [
        ("Conv + activation -> FusedConv", cpu and "Conv" in src and bool(src & ACTIVATIONS), {"FusedConv"},
         "ONNX Runtime fuses them on the CPU at the 'extended' level and above"),
        ("layer norm -> LayerNormalization", bool(LAYER_NORM_OPS & src or src >= NORM_SPELLED),
         LAYER_NORM_OPS, "ONNX Runtime fuses the spellings that square with Pow (ReduceMean-Sub-Pow-"
         "ReduceMean-Add-Sqrt-Div; RMSNorm's Pow-ReduceMean-Add-Sqrt-Div)"),
        ("GELU -> Gelu", bool(GELU_OPS & src or "Erf" in src), GELU_OPS, "Erf-based GELU runs as one kernel"),
        ("attention -> Attention/GroupQueryAttention", False, ATTENTION_OPS,
         "fused at load only for BERT-like graphs; export with the fused op or run "
         "onnxruntime.transformers' optimizer"),
    ]  # fmt: skip
    out: list[dict[str, Any]] = []
    for name, expected, ops, note in checks:
        if "attention" in name:
            expected = bool(ATTENTION_OPS & src)  # the export chose it: it must survive
            if not expected and not ({"Softmax", "MatMul"} <= src):
                continue
        elif name.startswith("layer norm") and not expected and profile.squares_with_mul and not (ops & ran):
            note = (
                "its norm squares with Mul(x, x), which no ONNX Runtime fusion matches: it runs as "
                "separate kernels (export it with Pow(x, 2), as torch does, or with LayerNormalization)"
            )
        elif not expected and not (ops & ran):
            continue
        present = sorted(ops & ran)
        out.append({"fusion": name, "expected": expected, "present": present,
                    "ok": bool(present) or not expected, "note": note})  # fmt: skip
    other = sorted((FUSED_OPS & ran) - {op for f in out for op in f["present"]})
    if other:
        out.append({"fusion": "other fused operators", "expected": False, "present": other, "ok": True,
                    "note": "present in the optimized graph"})  # fmt: skip
    return out
