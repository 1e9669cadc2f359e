"""A capacity plan: language models, streams and memory against one device (``edgepipe plan``).

The memory part goes through the same code as ``edgepipe run FILE --plan``
(:class:`~edgepipe.planning.memory.MemoryPlan`, :class:`~edgepipe.runtime.memory_plan.PlanReport`),
with the device's RAM as the limit and 30% of it kept free. For a pipeline file, the
pipeline's own nodes reserve what they would (:func:`~edgepipe.runtime.memory_plan.plan_graph`);
otherwise the weights, the KV caches and the streams' frame pools are reserved here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from edgepipe.core.headroom import HEADROOM
from edgepipe.deploy.plan.capacity import (
    KVTerms,
    ModelFacts,
    Throughput,
    decimal,
    kv_terms,
    quantize_advice,
    throughput,
)
from edgepipe.deploy.plan.decode import DecodeLoad, StreamSet, decode_loads
from edgepipe.deploy.plan.devices import Device
from edgepipe.media.frame import frame_pool_size
from edgepipe.media.reservations import pool_capacity
from edgepipe.planning.memory import MemoryPlan
from edgepipe.runtime.memory_plan import PlanReport


@dataclass(frozen=True)
class Target:
    """The device planned against: the table's figures, each overridable by a flag."""

    name: str
    bandwidth_gb_s: float | None
    tops: float | None
    ram_gb: float | None
    device: Device | None = None

    @property
    def ram_bytes(self) -> int | None:
        return None if self.ram_gb is None else int(self.ram_gb * 1e9)


@dataclass(frozen=True)
class ModelPlan:
    model: ModelFacts
    owner: str
    """Its name in the memory plan (a pipeline's node id, or ``model``)."""
    rate: Throughput
    kv: KVTerms | None
    sequences: int


@dataclass
class CapacityPlan:
    target: Target
    models: list[ModelPlan]
    memory: PlanReport
    decode: list[DecodeLoad]
    advice: list[str] = field(default_factory=list)

    @property
    def bandwidth_needed_gb_s(self) -> float | None:
        needed = [m.rate.bandwidth_needed_gb_s for m in self.models]
        known = [n for n in needed if n is not None]
        return sum(known) if known else None

    @property
    def fits(self) -> bool:
        """False when a limit the plan can judge is passed."""
        bandwidth = self.bandwidth_needed_gb_s
        over_bw = (
            bandwidth is not None
            and self.target.bandwidth_gb_s is not None
            and bandwidth > self.target.bandwidth_gb_s
        )
        rates_ok = all(m.rate.fits is not False for m in self.models)
        return not over_bw and rates_ok and self.memory.fits and all(d.fits is not False for d in self.decode)


def memory_plan(target: Target) -> MemoryPlan:
    """A dry-run plan with the device's RAM as the limit, 30% kept free (this machine's limit
    when the RAM is not known)."""
    return MemoryPlan(budget_frac=1 - HEADROOM, limit_bytes=target.ram_bytes, refuse=False)


def reserve_model(
    plan: MemoryPlan, model: ModelFacts, owner: str, kv: KVTerms | None, sequences: int
) -> None:
    plan.reserve(owner, f"model weights ({model.dtype})", model.weight_bytes, hint="quantize the weights")
    if kv is not None:
        what = f"KV cache ({sequences} x {kv.positions} positions, {decimal(kv.nbytes)} each)"
        plan.reserve(owner, what, kv.nbytes * sequences, hint="shorten the context")


def reserve_streams(plan: MemoryPlan, streams: Sequence[StreamSet]) -> None:
    """Each stream's frame pool, as a source with one consumer would size it."""
    for n, s in enumerate(streams):
        what, nbytes = frame_pool_size(pool_capacity(None, (1,)), s.width, s.height)
        plan.reserve(s.origin or f"streams[{n}]", f"{s.count} x {what}", nbytes * s.count)


def model_plan(
    model: ModelFacts, owner: str, target: Target, tokens_per_s: float | None, positions: int, sequences: int
) -> ModelPlan:
    rate = throughput(model, tokens_per_s, target.bandwidth_gb_s, target.tops)
    return ModelPlan(model, owner, rate, kv_terms(model, positions), sequences)


def report_of(plan: MemoryPlan, name: str, owners: list[str]) -> PlanReport:
    """The plan as ``edgepipe run --plan`` reports one (owners in the order given)."""
    return PlanReport(
        pipeline=name,
        nodes=tuple(owners),
        entries=tuple(sorted(plan.entries(), key=lambda r: r.key)),
        unknowns=(),
        failures=(),
        budget_bytes=plan.budget_bytes,
        limit_bytes=plan.limit_bytes,
        budget_frac=plan.budget_frac,
        refusal=plan.first_refusal,
    )


def advise(result: CapacityPlan) -> list[str]:
    """What to change, one line per limit passed."""
    lines = []
    target = result.target
    for m in result.models:
        wanted = m.rate.tokens_per_s
        limit = m.rate.max_tokens_per_s_bandwidth
        if wanted is not None and target.bandwidth_gb_s is not None and limit is not None and wanted > limit:
            lines.append(f"{m.owner}: {quantize_advice(m.model, wanted, target.bandwidth_gb_s)}")
            needed = m.rate.bandwidth_needed_gb_s or 0.0
            lines.append(
                f"{m.owner}: or offload it to an engine on another machine: {needed:.1f} GB/s needed at "
                f"{wanted:g} tokens/s, {target.bandwidth_gb_s:g} GB/s here "
                '(Describe("http://HOST:8080/v1"), describe_scene --server; docs/language-models.md)'
            )
    report = result.memory
    if not report.fits and report.budget_bytes is not None:
        over = report.host_bytes - report.budget_bytes
        lines.extend(_memory_advice(result.models, over))
    for load in result.decode:
        most = load.max_streams()
        if load.fits is False and most is not None:
            one = load.streams[0]
            lines.append(
                f"{load.codec}: at most {most} stream(s) of {one.width}x{one.height}@{one.fps:g}: "
                "fewer streams, a lower frame rate or resolution"
            )
        elif load.limits == ():
            decoded = target.device.decode if target.device else {}
            hardware = ", ".join(c for c, lim in decoded.items() if lim) or "none listed"
            lines.append(
                f"{load.codec}: decoded on the CPU here; cameras in a codec decoded in hardware "
                f"({hardware}) spare it"
            )
    return lines


def _memory_advice(models: list[ModelPlan], over: int) -> list[str]:
    lines = [f"memory: {decimal(over)} over the budget"]
    for m in models:
        if m.kv is not None and m.kv.nbytes > 0:
            per_position = m.kv.nbytes / m.kv.positions * m.sequences
            shorter = m.kv.positions - math.ceil(over / per_position)
            if shorter > 0:
                lines.append(f"{m.owner}: shorten the context to {shorter} positions (--max-seq-len)")
            if m.sequences > 1:
                fewer = m.sequences - math.ceil(over / m.kv.nbytes)
                if fewer > 0:
                    lines.append(f"{m.owner}: serve at most {fewer} sequences at once (--sequences)")
        for dtype, size in (("int8", 1.0), ("int4", 0.5)):
            saved = m.model.weight_bytes - m.model.params * size
            if saved >= over:
                lines.append(f"{m.owner}: quantize the weights to {dtype} (saves {decimal(saved)})")
                break
    return lines


def build(
    target: Target, models: list[ModelPlan], memory: PlanReport, streams: list[StreamSet]
) -> CapacityPlan:
    result = CapacityPlan(target, models, memory, decode_loads(streams, target.device))
    result.advice = advise(result)
    return result


def as_dict(result: CapacityPlan) -> dict[str, Any]:
    """The plan for ``--format json``."""
    t = result.target
    report = result.memory
    return {
        "device": {
            "name": t.name,
            "bandwidth_gb_s": t.bandwidth_gb_s,
            "tops": t.tops,
            "ram_gb": t.ram_gb,
            "unsure": list(t.device.unsure) if t.device else [],
            "source": t.device.source if t.device else "flags",
        },
        "bandwidth_needed_gb_s": result.bandwidth_needed_gb_s,
        "models": [_model_dict(m) for m in result.models],
        "memory": {
            "budget_bytes": report.budget_bytes,
            "limit_bytes": report.limit_bytes,
            "headroom": HEADROOM,
            "total_bytes": report.host_bytes,
            "fits": report.fits,
            "entries": [
                {"owner": r.owner, "what": r.what, "bytes": r.nbytes, "device": r.device}
                for r in report.entries
            ],
            "unknowns": [{"owner": u.owner, "what": u.what, "why": u.why} for u in report.unknowns],
            "failures": [{"owner": o, "why": w} for o, w in report.failures],
        },
        "decode": [
            {
                "codec": d.codec,
                "streams": [str(s) for s in d.streams],
                "pixel_rate": d.pixel_rate,
                "capacity": d.capacity,
                "load": d.load_frac,
                "fits": d.fits,
                "max_streams": d.max_streams(),
                "verdict": d.verdict(),
            }
            for d in result.decode
        ],
        "advice": result.advice,
        "fits": result.fits,
    }


def _model_dict(m: ModelPlan) -> dict[str, Any]:
    r = m.rate
    kv = m.kv
    return {
        "owner": m.owner,
        "source": m.model.source,
        "params": m.model.params,
        "dtype": m.model.dtype,
        "params_by_dtype": dict(m.model.formats),
        "packed_params": m.model.packed_params,
        "bytes_per_token": r.bytes_per_token,
        "tokens_per_s": r.tokens_per_s,
        "bandwidth_needed_gb_s": r.bandwidth_needed_gb_s,
        "compute_needed_tops": r.compute_needed_tops,
        "max_tokens_per_s": {
            "bandwidth": r.max_tokens_per_s_bandwidth,
            "compute": r.max_tokens_per_s_compute,
        },
        "binding": r.binding,
        "fits": r.fits,
        "notes": list(m.model.notes),
        "kv_cache": None
        if kv is None
        else {
            "layers": kv.layers,
            "positions": kv.positions,
            "kv_heads": kv.kv_heads,
            "head_dim": kv.head_dim,
            "bytes_per_element": kv.itemsize,
            "per_sequence_bytes": kv.nbytes,
            "sequences": m.sequences,
            "total_bytes": kv.nbytes * m.sequences,
            "formula": kv.formula(),
            "other_forms": kv.other_forms(m.model.heads),
        },
    }
