"""The sections of the language-model benchmark (:mod:`scripts.bench.lm`) past the runner
itself: quantized weights, slots, speculation, a verify step's cost, the roofline at the best
thread count and energy, on one shape's shared-buffer file."""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from edgepipe.deploy.power.meter import EnergyMeter, energy_json, energy_lines
from edgepipe.deploy.quantize.decoder import quantize_decoder
from edgepipe.infer.session import SessionConfig
from edgepipe.lm.bench import (
    cache_sized_mb,
    description_prompts,
    greedy_run,
    logits_cosine,
    memory_bandwidth,
    slot_figures,
    speculation_figures,
    verify_cost,
    weight_bytes_per_token,
)
from edgepipe.lm.generate import LanguageModel
from scripts.tiny_lm import TinyConfig

SLOT_COUNTS = (1, 2, 4)
DESCRIPTION_ROOM = 320
"""Tokens a description prompt may take (byte tokens: under 250 here)."""


def quantize(src: Path, dst: Path, bits: int, keep_head: bool = False) -> Path:
    """``src``'s model quantized as ``edgepipe quantize`` does by default (``bits``-bit blocks of
    32, accuracy level 4, the embedding kept), the head kept fp32 too when ``keep_head``."""
    if not (dst / "model.onnx").is_file():
        print(f"quantizing {src.name} to int{bits}{' (head fp32)' if keep_head else ''} ...", flush=True)
        keep = ("embed", "lm_head") if keep_head else ("embed",)
        quantize_decoder(src, dst, bits=bits, block=32, accuracy_level=4, keep=keep)
    return dst


def decode_rate(lm: LanguageModel, prompt: list[int], tokens: int, rounds: int) -> float:
    """Median greedy decode tokens/s over ``rounds`` runs of ``prompt``."""
    return statistics.median(greedy_run(lm, prompt, tokens)[1] for _ in range(rounds))


def bench_features(folder: Path, cfg: TinyConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Quantization, slots, speculation, a verify step's cost, the roofline and energy, on one
    shape's shared-buffer (gqa layout) file."""
    ctx = max(args.contexts_list)
    max_seq = cfg.max_seq_len
    one = SessionConfig(threads=1, timeout_s=300.0)
    prompt = random_prompt_ids(ctx)
    # -- fp32, int8, int4 (1 thread, the last context) and the logits' cosine to fp32
    variants = {"fp32": folder}
    for bits in (8, 4):
        variants[f"int{bits}"] = quantize(folder, folder.with_name(f"{folder.name}-int{bits}"), bits)
    variants["int4_head_fp32"] = quantize(folder, folder.with_name(f"{folder.name}-int4-headfp32"), 4, True)
    models = {k: LanguageModel(f, max_seq_len=max_seq, session=one, speculate=0) for k, f in variants.items()}
    rates: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(args.rounds):  # alternating, so drift hits all
        for name, lm in models.items():
            rates[name].append(decode_rate(lm, prompt, args.tokens, 1))
    rate = {k: statistics.median(v) for k, v in rates.items()}
    check = random_prompt_ids(min(64, max_seq - 1), seed=5)
    quant: dict[str, Any] = {"context": ctx, "threads": 1}
    for name in models:
        quant[f"{name}_tokens_per_s"] = round(rate[name], 2)
        quant[f"{name}_weight_mb_per_token"] = round(
            weight_bytes_per_token(variants[name] / "model.onnx") / 1e6, 1
        )
        if name != "fp32":
            quant[f"{name}_over_fp32"] = round(rate[name] / rate["fp32"], 3)
            quant[f"{name}_cosine"] = round(logits_cosine(models["fp32"], models[name], check), 4)
    for name in list(models)[1:]:
        models.pop(name).close()
    print(f"  quantized, 1 thread, context {ctx}: fp32 {rate['fp32']:.2f} tok/s, int8 {rate['int8']:.2f} "
          f"({quant['int8_over_fp32']:.2f}x, cosine {quant['int8_cosine']:.4f}), int4 {rate['int4']:.2f} "
          f"({quant['int4_over_fp32']:.2f}x, cosine {quant['int4_cosine']:.4f}); "
          f"int4 with the head kept fp32 {rate['int4_head_fp32']:.2f} "
          f"({quant['int4_head_fp32_over_fp32']:.2f}x, cosine {quant['int4_head_fp32_cosine']:.4f})",
          flush=True)  # fmt: skip
    # -- fp32 at each thread count (the best one is the roofline's figure), energy per token
    fp32 = {1: rate["fp32"]}
    meter = EnergyMeter()
    meter.start()
    timed = 0
    for threads in range(2, (os.cpu_count() or 1) + 1):
        config = SessionConfig(threads=threads, timeout_s=300.0)
        lm = LanguageModel(folder, max_seq_len=max_seq, session=config, speculate=0)
        fp32[threads] = decode_rate(lm, prompt, args.tokens, args.rounds)
        timed += args.rounds * args.tokens  # prefills included in the energy: stated with it
        lm.close()
    energies = meter.stop()
    best_threads = max(fp32, key=lambda t: fp32[t])
    # -- the roofline: DRAM-sized buffer and an L3-sized one
    weights = weight_bytes_per_token(folder / "model.onnx")
    dram = memory_bandwidth(size_mb=256)
    cached_mb = cache_sized_mb()
    l3 = memory_bandwidth(size_mb=cached_mb)
    roofline = {
        "dram_gb_s": round(dram / 1e9, 2), "l3_sized_gb_s": round(l3 / 1e9, 2),
        "weight_mb_per_token": round(weights / 1e6, 1), "best_threads": best_threads,
        "fp32_tokens_per_s_by_threads": {str(t): round(r, 2) for t, r in fp32.items()},
        "dram_fraction": round(weights * fp32[best_threads] / dram, 3),
        "l3_fraction": round(weights * fp32[best_threads] / l3, 3),
    }  # fmt: skip
    print(f"  roofline: fp32 {', '.join(f'{t} thread(s) {r:.2f}' for t, r in fp32.items())} tok/s, best "
          f"{best_threads}; {weights / 1e6:.1f} MB a token; DRAM-sized buffer (256 MB) {dram / 1e9:.2f} GB/s "
          f"-> {roofline['dram_fraction']:.0%} of it; L3-sized buffer ({cached_mb} MB) {l3 / 1e9:.2f} GB/s "
          f"-> {roofline['l3_fraction']:.0%}", flush=True)  # fmt: skip
    energy = energy_json(meter, energies, timed, "token") if timed else {"measurable": False,
        "reason": "not measurable here (no run of 2+ threads)", "sources": []}  # fmt: skip
    for line in energy_lines(energy, "token"):
        print(f"  {line} (fp32 runs of 2+ threads, prefill included)")
    # -- a verify step of 5 positions against a one-token step
    verify = verify_cost(models["fp32"], ctx, width=5, reps=args.verify_reps)
    print(f"  verify step of 5 at context {ctx}: {verify['verify_ms']:.2f} ms vs {verify['step1_ms']:.2f} ms "
          f"for one token ({verify['ratio']:.2f}x)", flush=True)  # fmt: skip
    models.pop("fp32").close()
    # -- slots (fp32, 1 thread): steady decoding of N requests together, per context
    contexts = sorted(set(args.contexts_list))
    lm = LanguageModel(folder, max_seq_len=max_seq, session=one, slots=max(SLOT_COUNTS), speculate=0)
    slot_rows: dict[str, Any] = {}
    for n in SLOT_COUNTS:  # warm-up: the first runs of each batch shape are slow
        slot_figures(lm, [random_prompt_ids(8, seed=i) for i in range(n)], 4)
    for context in contexts:
        for n in SLOT_COUNTS:
            prompts = [random_prompt_ids(context, seed=10 + i) for i in range(n)]
            row = slot_figures(lm, prompts, args.tokens)
            slot_rows[f"{n}@{context}"] = row
            reqs = row["requests"]
            ttfts = ", ".join(f"{r['ttft_ms']:.0f}" for r in reqs)
            rate_lo, rate_hi = min(r["tokens_per_s"] for r in reqs), max(r["tokens_per_s"] for r in reqs)
            print(f"  {n} slot(s), context {context}: aggregate {row['aggregate_tokens_per_s']:.2f} tok/s, "
                  f"per request {rate_lo:.2f}..{rate_hi:.2f} tok/s, TTFT "
                  f"{ttfts} ms, TPOT p50 "
                  f"{max(r['tpot_p50_ms'] for r in reqs):.2f} ms p95 {row['tpot_p95_ms']:.2f} ms",
                  flush=True)  # fmt: skip
    lm.close()
    top = max(SLOT_COUNTS)
    slots: dict[str, Any] = {"threads": 1, "runs": slot_rows}
    for context in contexts:
        ratio = (
            slot_rows[f"{top}@{context}"]["aggregate_tokens_per_s"]
            / slot_rows[f"1@{context}"]["aggregate_tokens_per_s"]
        )
        slots[f"agg_{top}_over_1_ctx{context}"] = round(ratio, 3)
    last = contexts[-1]
    slots[f"tpot_p95_{top}_over_1"] = round(
        slot_rows[f"{top}@{last}"]["tpot_p95_ms"] / slot_rows[f"1@{last}"]["tpot_p95_ms"], 3
    )
    # -- speculation on the description workload (fp32, the bench's threads)
    session = SessionConfig(threads=args.threads_used, timeout_s=300.0)
    plain = LanguageModel(folder, max_seq_len=max_seq, session=session, speculate=0)
    spec = LanguageModel(folder, max_seq_len=max_seq, session=session)
    prompts = description_prompts(plain, args.spec_prompts)
    speculative = speculation_figures(plain, spec, prompts, args.spec_tokens)
    speculative["verify5_over_step1"] = verify["ratio"]
    speculative["verify"] = verify
    plain.close()
    spec.close()
    sp = speculative
    print(f"  speculation on {len(prompts)} description prompts ({args.spec_tokens} tokens each): plain "
          f"{sp['plain_tokens_per_s']:.2f} tok/s, speculative {sp['spec_tokens_per_s']:.2f} "
          f"({sp['net_over_plain']:.2f}x), {sp['accepted_per_step']:.2f} drafts kept a verify "
          f"step, acceptance {speculative['acceptance_rate']:.0%} of drafts; outputs identical: "
          f"{speculative['identical']}", flush=True)  # fmt: skip
    return {
        "quant": quant,
        "slots": slots,
        "speculative": speculative,
        "roofline": roofline,
        "energy": energy,
    }


def random_prompt_ids(length: int, seed: int = 0) -> list[int]:
    """``length`` byte tokens."""
    return np.random.default_rng(seed).integers(0, 256, length).tolist()
