"""``edgepipe plan``'s text for people: every sum with its terms, then what to change."""

from __future__ import annotations

from edgepipe.core.headroom import HEADROOM
from edgepipe.deploy.plan.capacity import DTYPE_BYTES, decimal
from edgepipe.deploy.plan.device_plan import CapacityPlan, ModelPlan, Target


def _figure(value: float | None, unit: str, field: str, target: Target) -> str:
    if value is None:
        return f"{unit}: not known"
    mark = " (derived or unsure: see the source)" if target.device and field in target.device.unsure else ""
    return f"{value:g} {unit}{mark}"


def target_lines(target: Target) -> list[str]:
    d = target.device
    title = f"{d.title} ({d.name})" if d else target.name
    compute = _figure(target.tops, "TOPS", "compute_tops", target)
    if d and d.compute_note and target.tops == d.compute_tops:
        compute += f" ({d.compute_note})"
    lines = [
        f"device: {title}",
        f"  memory bandwidth {_figure(target.bandwidth_gb_s, 'GB/s', 'bandwidth_gb_s', target)}; "
        f"compute {compute}; RAM {_figure(target.ram_gb, 'GB', 'ram_gb', target)}",
    ]
    if d and d.accelerator:
        lines.append(f"  accelerator: {d.accelerator}")
    if d and (d.ops_note or d.ops_targets):
        first, *rest = d.ops_targets or ("",)
        also = f" (then {', '.join(rest)})" if rest else ""
        lines.append(f"  operators: {d.ops_note or f'edgepipe check-ops MODEL --target {first}{also}'}")
    lines.append(f"  source: {d.source}" if d else "  source: the command line")
    return lines


def model_lines(m: ModelPlan) -> list[str]:
    r, f = m.rate, m.model
    each = DTYPE_BYTES[f.dtype]
    name = f.source if m.owner == "model" else f"{m.owner} ({f.source})"
    lines = [f"model {name}: {f.params:,} parameters, {f.weight_format()}"]
    lines += [f"  note: {n}" for n in f.notes]
    lines.append(
        f"  bytes read per token: {f.params:,} parameters x {each:g} bytes = {decimal(r.bytes_per_token)}"
        if f.weight_bytes == int(f.params * each)
        else f"  bytes read per token: the weights' bytes = {decimal(r.bytes_per_token)}"
    )
    if r.tokens_per_s is not None:
        need = r.bandwidth_needed_gb_s or 0.0
        share = f" of {r.bandwidth_gb_s:g} GB/s: {need / r.bandwidth_gb_s:.0%}" if r.bandwidth_gb_s else ""
        lines.append(
            f"  bandwidth needed: {decimal(r.bytes_per_token)} x {r.tokens_per_s:g} tokens/s = "
            f"{need:.1f} GB/s{share}"
            if need >= 0.1
            else f"{need:.3g} GB/s{share}"
        )
        ops = r.compute_needed_tops or 0.0
        share = f" of {r.tops:g}: {ops / r.tops:.1%}" if r.tops else ""
        lines.append(
            f"  compute needed: 2 x {f.params:,} x {r.tokens_per_s:g} tokens/s = {ops:.3g} TOPS{share}"
        )
    else:
        lines.append("  no --tokens-per-s target: the limits below say how fast it can go")
    if r.binding is not None:
        bw, cp = r.max_tokens_per_s_bandwidth, r.max_tokens_per_s_compute
        parts = [
            f"bandwidth allows {bw:.1f} tokens/s" if bw is not None else "",
            f"compute allows {cp:.0f} tokens/s" if cp is not None else "",
        ]
        lines.append(
            f"  binds first: {r.binding} ({'; '.join(p for p in parts if p)}; peak figures: "
            "real decoding gets less)"
        )
    if m.kv is None:
        lines.append("  KV cache: unknown (give --layers, --kv-heads and --head-dim, or the ONNX model)")
        return lines
    lines.append(f"  KV cache per sequence: {m.kv.formula()}")
    lines += [f"    ({form})" for form in m.kv.other_forms(f.heads)]
    lines.append(
        f"  KV cache in total: {m.sequences} sequence(s) x {decimal(m.kv.nbytes)} = "
        f"{decimal(m.kv.nbytes * m.sequences)}"
    )
    return lines


def render(result: CapacityPlan, notes: list[str]) -> list[str]:
    """Everything before the memory plan (printed by :func:`edgepipe.cli.memory_plan.print_plan`)."""
    lines = target_lines(result.target)
    for m in result.models:
        lines += model_lines(m)
    if result.decode:
        lines.append("video decode:")
        for load in result.decode:
            lines.append(
                f"  {', '.join(s.origin + ': ' + str(s) if s.origin else str(s) for s in load.streams)}"
            )
            lines.append(f"    {load.verdict()}")
    lines += [f"note: {n}" for n in notes]
    lines.append(
        f"memory (against {'the device' if result.target.ram_gb else 'this machine'}'s RAM, "
        f"{HEADROOM:.0%} kept free):"
    )
    return lines


def closing(result: CapacityPlan) -> list[str]:
    lines = []
    if result.advice:
        lines.append("what to change:")
        lines += [f"  - {a}" for a in result.advice]
    lines.append("plan: fits" if result.fits else "plan: does NOT fit")
    return lines
