"""``edgepipe check-ops``' output: a table for people, a dict for ``--format json``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from edgepipe.deploy.check_ops.check import Check, OpUse
from edgepipe.deploy.check_ops.placement import Placement
from edgepipe.deploy.output import console, table


def _label(use: OpUse) -> str:
    return use.op_type if use.domain == "ai.onnx" else f"{use.domain}:{use.op_type}"


def _counts(counts: Counter[str]) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.most_common())


def cost(result: Check) -> str:
    """What the fallbacks cost, in one line."""
    t, b = result.target, result.boundaries
    n = result.unsupported_nodes
    if t.host_memory:
        return f"{n} node(s) have no kernel here: the model does not load on {t.target} as it is"
    crossings = f"{b.to_host} tensor(s) device->host and {b.to_device} host->device on every run"
    if t.kind == "converter":
        return (
            f"{n} node(s) off the NPU: the model is cut into {b.partitions} NPU part(s) with CPU work "
            f"between them; {crossings} (NPU<->CPU)"
        )
    return f"{n} node(s) fall back; {t.target} runs {b.partitions} partition(s); copies: {crossings}"


def render(result: Check, file: str, placed: Placement | None) -> None:
    out = console()
    t = result.target
    opsets = ", ".join(f"{d} {v}" for d, v in result.opsets.items())
    print(f"model: {result.model} ({file}): {result.nodes} nodes, opset {opsets}")
    print(f"target: {t.target}: {t.title}")
    print(f"  table: {t.source}")
    rows = [
        (
            _label(u),
            u.opset if u.opset is not None else "-",
            u.count,
            u.in_subgraphs or "",
            "yes" if u.supported else "NO",
            u.note,
        )
        for u in result.ops
    ]
    out.print(
        table(
            None,
            ("operator", "opset", "count", "in subgraphs", t.target, "note"),
            rows,
            right=("opset", "count"),
        )
    )
    if result.unsupported:
        print(f"unsupported on {t.target}:")
        for u in result.unsupported:
            print(f"  {_label(u)} x{u.count}: {u.note}")
            if u.advice:
                print(f"    do: {u.advice}")
            print(f"    else it runs on: {u.fallback}")
        print(f"  cost: {cost(result)}")
    if placed is not None:
        if placed.confirmed:
            print("placement (an ONNX Runtime session, the model's own nodes):")
            for provider, counts in placed.providers.items():
                print(f"  {provider}: {sum(counts.values())} nodes ({_counts(counts)})")
        else:
            print(f"placement: not confirmed: {placed.reason}")
    total = len(result.ops)
    if result.unsupported:
        print(
            f"check-ops: {len(result.unsupported)} of {total} operators ({result.unsupported_nodes} "
            f"of {result.nodes} nodes) NOT supported on {t.target}"
        )
    else:
        print(f"check-ops: all {total} operators ({result.nodes} nodes) supported on {t.target}")
    if placed is not None and placed.confirmed and placed.off_target(t.provider):
        off = sum(sum(c.values()) for c in placed.off_target(t.provider).values())
        print(f"check-ops: ONNX Runtime placed {off} node(s) off {t.provider}")


def as_dict(result: Check, file: str, placed: Placement | None) -> dict[str, Any]:
    t, b = result.target, result.boundaries
    return {
        "model": result.model,
        "path": file,
        "target": {
            "name": t.target,
            "title": t.title,
            "provider": t.provider,
            "kind": t.kind,
            "source": t.source,
            "version": t.version,
        },
        "opsets": result.opsets,
        "nodes": result.nodes,
        "ops": [
            {
                "domain": u.domain,
                "op_type": u.op_type,
                "opset": u.opset,
                "count": u.count,
                "in_subgraphs": u.in_subgraphs,
                "supported": u.supported,
                "note": u.note,
                "advice": u.advice,
                "fallback": u.fallback,
            }
            for u in result.ops
        ],
        "unsupported": [_label(u) for u in result.unsupported],
        "unsupported_nodes": result.unsupported_nodes,
        "boundaries": {"to_host": b.to_host, "to_device": b.to_device, "partitions": b.partitions},
        "cost": cost(result) if result.unsupported else "",
        "placement": None
        if placed is None
        else {"confirmed": placed.confirmed, "reason": placed.reason, "providers": placed.providers},
    }
