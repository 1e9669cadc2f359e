"""ONNX Runtime's profiles in a trace: which operators ran on which provider, for how long, and
whether the fusions expected of the model happened.

A profile (``SessionOptions.enable_profiling``) is a JSON list of Chrome-trace events: ``Session``
events (loading, initialization, each run) and one ``Node`` event per operator run, named
``<node>_kernel_time`` with ``args.op_name`` and ``args.provider``, ``ts`` in microseconds from
the profiler's start, whose wall-clock time ``get_profiling_start_time_ns()`` gives.

The operators that run are those of the *optimized* graph, so a fusion shows as its fused
operator (``FusedConv``, ``LayerNormalization`` …) in the profile. What is expected comes from
the model file's own operators: a ``Conv`` followed by an activation fuses into ``FusedConv`` on
the CPU; a decomposed layer norm (``ReduceMean`` … ``Sqrt``) into ``LayerNormalization`` or its
``Skip``/``Simplified`` forms; ``Erf`` GELU into ``Gelu``/``BiasGelu``/``FastGelu``. Attention
(``Attention``, ``MultiHeadAttention``, ``GroupQueryAttention``) is fused at load time only for
BERT-like graphs: a decoder gets it from its export or ``onnxruntime.transformers``' optimizer,
so its absence is reported, not counted as a problem.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgepipe.infer import onnxfile

ACTIVATIONS = {"Relu", "LeakyRelu", "Sigmoid", "Clip", "HardSigmoid", "Tanh", "HardSwish"}
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

    @property
    def op_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("cat") == "Node" and "op_name" in e.get("args", {})]


def read_profile(model: str, path: Path, start_ns: int, model_file: Path | None) -> Profile:
    """The profile ONNX Runtime wrote at ``path`` (``end_profiling()``'s return)."""
    events = json.loads(Path(path).read_text())
    ops: set[str] = set()
    if model_file is not None:
        try:
            ops = {op for _, op in onnxfile.node_ops(model_file.read_bytes())}
        except (OSError, onnxfile.OnnxFormatError, KeyError):
            ops = set()
    return Profile(model, Path(path), start_ns, [e for e in events if isinstance(e, dict)], model_file, ops)


def operators(profile: Profile, since_ns: int = 0) -> list[dict[str, Any]]:
    """Per (operator, provider): runs and total time, slowest first; only the operators that
    started at or after ``since_ns`` (wall clock: leave out a warm-up run made at load)."""
    runs: Counter[tuple[str, str]] = Counter()
    total_us: defaultdict[tuple[str, str], int] = defaultdict(int)
    for e in profile.op_events:
        if profile.start_ns + int(e.get("ts", 0)) * 1000 < since_ns:
            continue
        key = (e["args"]["op_name"], e["args"].get("provider", "?"))
        runs[key] += 1
        total_us[key] += max(0, int(e.get("dur", 0)))
    rows = [{"op": op, "provider": prov, "runs": runs[(op, prov)], "total_ms": total_us[(op, prov)] / 1000}
            for op, prov in runs]  # fmt: skip
    return sorted(rows, key=lambda r: -r["total_ms"])


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
        ("layer norm -> LayerNormalization", bool(LAYER_NORM_OPS & src or {"ReduceMean", "Sqrt"} <= src),
         LAYER_NORM_OPS, "ONNX Runtime fuses the spellings it knows (ReduceMean-Sub-Pow-ReduceMean-Add-"
         "Sqrt-Div); others run as separate kernels: export with LayerNormalization"),
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
