#!/usr/bin/env python3
"""Decode tokens/s of edgepipe's runner against the usual naive loop, and the memory roofline.

The naive loop is what most hand-written decoders do: ``session.run`` with a feeds dict of
fresh arrays every step, the ``present`` outputs fed back as the next ``past``, no IO binding.
Both run each of two files with the same weights: the Optimum-style ``concat`` file and the
``gqa`` file (GroupQueryAttention with a cache buffer of max_seq_len: the naive loop feeds the
whole buffer back every step, edgepipe binds one buffer as past and present). Same prompt,
same greedy tokens (checked), same intra-op threads; prompts of 256 and 1024 tokens, then
``--tokens`` decode steps. Ratios are per file (same model), plus the gqa runner against the
naive loop on the concat file (same weights, the usual export).

Two model shapes of about 100-135M parameters run by default (``--shapes mha,gqa``): ``mha``
has a kv head per attention head (GPT-2, OPT, Pythia: the classic Optimum exports), ``gqa``
has ``--kv-heads`` 4 of 12 (Llama, Qwen, Phi-3). What the runner saves is cache traffic, so
its gain grows with the cache's share of the bytes read per step: large on ``mha``, small on
``gqa`` shapes, where on a CPU both loops spend most of a step streaming the same weights.

    python -m scripts.bench.lm            # both shapes (built once, cached in /tmp): ~15 min on 2 cores
    python -m scripts.bench.lm --quick    # a small model, 1 round

Then, per shape, on the shared-buffer (gqa layout) file: fp32, int8 and int4 decode tokens/s at
1 thread and the last context, with the mean cosine of their logits to fp32's (quantized as
``edgepipe quantize`` does by default: :func:`.lm_features.quantize`); 1, 2 and 4
requests decoding together (aggregate and per-request tokens/s, TTFT, TPOT p50/p95); a verify
step of 5 positions against a one-token step; speculative against plain decoding on
``Describe``-style prompts (acceptance printed; outputs must be identical); fp32 at each thread
count against the roofline on a DRAM-sized buffer (and an L3-sized one beside it); energy per
token where a meter exists. The targets are the constants below, asked of every shape;
exit 1 when one is missed.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from edgepipe.infer.session import SessionConfig
from edgepipe.lm.bench import greedy_run, memory_bandwidth, slot_room, weight_bytes_per_token
from edgepipe.lm.generate import LanguageModel
from edgepipe.sched import cpu_budget
from scripts.bench.lm_features import DESCRIPTION_ROOM, SLOT_COUNTS, bench_features
from scripts.tiny_lm import TinyConfig, add_size_flags, config_from_flags, write

TARGET_RATIO = 1.2
"""Runner over the naive loop at the last context, on every shape."""
TARGET_ROOFLINE = 0.7
"""fp32 decode (one request, best thread count) over the DRAM-sized roofline."""
TARGET_INT4 = 2.5
TARGET_INT8 = 1.6
"""Decode tokens/s over fp32's (1 thread, context 1024, head quantized, accuracy level 4)."""
TARGET_COSINE = {"int4": 0.95, "int8": 0.99}
"""Mean cosine of the quantized model's logits to fp32's."""
TARGET_AGG_4_OVER_1 = {256: 2.5, 1024: 2.0}
"""Aggregate tokens/s of 4 slots over one (fp32, 1 thread), per context."""
TARGET_TPOT_P95_4_OVER_1 = 1.6
"""Per-request TPOT p95 with 4 slots over a lone request's (at most)."""
TARGET_VERIFY5 = 1.5
"""A step of 5 positions over a one-token step at context 1024 (at most)."""
TARGET_SPEC_NET = 0.95
"""Speculation over plain decoding on the description workload (at least)."""


def naive_decode(
    model: Path,
    prompt: list[int],
    tokens: int,
    threads: int,
    layers: int,
    kv_heads: int,
    head_dim: int,
    cache_len: int = 0,
) -> tuple[list[int], float]:
    """Greedy tokens and decode tokens/s of the plain loop (prefill excluded from the rate)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    past = {
        f"past_key_values.{i}.{kind}": np.zeros((1, kv_heads, cache_len, head_dim), np.float32)
        for i in range(layers)
        for kind in ("key", "value")
    }
    names = [o.name for o in session.get_outputs()]
    ids = prompt
    out: list[int] = []
    start = 0
    t0 = 0.0
    for step in range(tokens):
        total = start + len(ids)
        feeds = {
            "input_ids": np.array([ids], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(start, total, dtype=np.int64)[None],
            **past,
        }
        results = session.run(names, feeds)
        logits = results[0]
        past = {
            name.replace("present", "past_key_values"): value
            for name, value in zip(names[1:], results[1:], strict=True)
        }
        token = int(np.argmax(logits[0, -1]))
        out.append(token)
        start, ids = total, [token]
        if step == 0:
            t0 = time.perf_counter()  # decode steps only, after the first token
    return out, (tokens - 1) / (time.perf_counter() - t0)


def model_folder(cfg: TinyConfig, layout: str) -> Path:
    """The model of this shape and layout, built once (cached in the temporary folder)."""
    root = Path(tempfile.gettempdir()) / "edgepipe-bench-lm"
    folder = root / f"{layout}-{cfg.hidden}x{cfg.layers}-kv{cfg.kv_heads}-{cfg.vocab}-{cfg.max_seq_len}"
    if not (folder / "model.onnx").is_file():
        print(f"building {folder} ({cfg.parameters() / 1e6:.0f}M parameters) ...", flush=True)
        write(folder, cfg, layout)
    return folder


def bench_shape(
    cfg: TinyConfig, contexts: list[int], tokens: int, rounds: int, threads: int
) -> dict[str, Any]:
    """Both files of one model shape: tokens/s of the runner and the naive loop, and the roofline."""
    max_seq = cfg.max_seq_len
    folders = {layout: model_folder(cfg, layout) for layout in ("concat", "gqa")}
    config = SessionConfig(threads=threads, timeout_s=120.0)
    # The runner's plain decode against the naive loop: speculation is measured on its own.
    models = {
        k: LanguageModel(f, max_seq_len=max_seq, session=config, speculate=0) for k, f in folders.items()
    }
    rng = np.random.default_rng(0)
    rows = []
    for context in contexts:
        prompt = rng.integers(0, 256, context).tolist()
        rates: dict[str, list[float]] = {"naive_concat": [], "naive_gqa": [], "concat": [], "gqa": []}
        reference: list[int] | None = None
        for _ in range(rounds):  # alternate, so drift on a shared machine hits all four
            for layout in ("concat", "gqa"):
                # The naive loop on each file: for the shared-buffer file it feeds the whole
                # max_seq_len present back as past every step, as a hand-written loop would.
                cache_len = 0 if layout == "concat" else max_seq
                out, rate = naive_decode(folders[layout] / "model.onnx", prompt, tokens, threads,
                                         cfg.layers, cfg.kv_heads, cfg.head_dim, cache_len)  # fmt: skip
                reference = reference or out
                assert out == reference, f"the naive loop on {layout} gives other tokens"
                rates[f"naive_{layout}"].append(rate)
                got, rate = greedy_run(models[layout], prompt, tokens)
                assert got == reference, f"{layout} tokens differ from the naive loop's"
                rates[layout].append(rate)
        med = {k: statistics.median(v) for k, v in rates.items()}
        row: dict[str, Any] = {"context": context}
        row.update({f"{k}_tokens_per_s": round(v, 2) for k, v in med.items()})
        row["ratio_concat"] = round(med["concat"] / med["naive_concat"], 3)  # same file
        row["ratio_gqa"] = round(med["gqa"] / med["naive_gqa"], 3)  # same file
        row["ratio_gqa_vs_naive_concat"] = round(med["gqa"] / med["naive_concat"], 3)  # same weights
        rows.append(row)
        print(
            f"  context {context:5d}: concat file: naive {med['naive_concat']:7.2f} tok/s, "
            f"runner {med['concat']:7.2f} ({row['ratio_concat']:.2f}x) | gqa file: naive "
            f"{med['naive_gqa']:7.2f}, runner {med['gqa']:7.2f} ({row['ratio_gqa']:.2f}x) | "
            f"runner gqa vs naive concat {row['ratio_gqa_vs_naive_concat']:.2f}x",
            flush=True,
        )
    bandwidth = memory_bandwidth()
    weights = weight_bytes_per_token(folders["gqa"] / "model.onnx")
    best = max(r["gqa_tokens_per_s"] for r in rows)
    roofline = weights * best / bandwidth
    kv_bytes = models["gqa"].runner.layout.kv_bytes(contexts[-1])
    print(
        f"  memory read bandwidth {bandwidth / 1e9:.2f} GB/s, weights read per token {weights / 1e6:.1f} MB: "
        f"roofline {bandwidth / weights:.1f} tok/s; best decode {best:.2f} tok/s = {roofline:.0%} of it; "
        f"the KV cache at context {contexts[-1]} is {kv_bytes / 1e6:.1f} MB "
        f"({kv_bytes / weights:.0%} of the weights)"
    )
    return {
        "parameters": cfg.parameters(),
        "kv_heads": cfg.kv_heads,
        "contexts": rows,
        "memory_gb_per_s": round(bandwidth / 1e9, 2),
        "weight_mb_per_token": round(weights / 1e6, 1),
        "kv_mb_at_last_context": round(kv_bytes / 1e6, 1),
        "roofline_fraction": round(roofline, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # ~100-135M parameters by default: large enough that decoding is bound by DRAM (the roofline).
    big = TinyConfig(vocab=32000, hidden=768, layers=12, heads=12, kv_heads=4, ffn=2048)
    add_size_flags(parser, big, skip=("max_seq_len",))
    parser.add_argument("--shapes", default="gqa,mha", help="mha: kv heads = heads; gqa: --kv-heads")
    parser.add_argument("--contexts", default="256,1024")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--spec-prompts", type=int, default=6, help="description prompts for speculation")
    parser.add_argument("--spec-tokens", type=int, default=48, help="tokens written after each of them")
    parser.add_argument("--verify-reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true",
                        help="a small model (hidden 256, 4 layers, vocab 4096), 16 tokens, 1 round",
                        )  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.hidden, args.layers, args.vocab, args.ffn, args.heads, args.kv_heads = 256, 4, 4096, 768, 8, 2
        args.tokens, args.rounds, args.spec_prompts, args.spec_tokens, args.verify_reps = 16, 1, 3, 24, 8
    contexts = [int(c) for c in args.contexts.split(",")]
    args.contexts_list = contexts
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if not shapes or any(s not in ("mha", "gqa") for s in shapes):
        parser.error("--shapes takes mha, gqa or both")
    # Room for the longest prompt, the decode tokens and what each of 4 slots writes while the
    # others read their prompts (64-token chunks).
    max_seq = max(contexts) + args.tokens + slot_room(64, [[0] * max(contexts)] * max(SLOT_COUNTS)) + 1
    max_seq = max(max_seq, DESCRIPTION_ROOM + args.spec_tokens)  # the description prompts fit too
    threads = args.threads or cpu_budget().threads
    args.threads_used = threads
    results = {}
    for shape in shapes:
        kv_heads = args.heads if shape == "mha" else args.kv_heads
        cfg = config_from_flags(args, max_seq_len=max_seq, kv_heads=kv_heads)
        size = f"{cfg.parameters() / 1e6:.0f}M parameters"
        print(f"{shape}: {cfg.heads} heads, {cfg.kv_heads} kv heads, {size}", flush=True)
        results[shape] = bench_shape(cfg, contexts, args.tokens, args.rounds, threads)
        results[shape].update(bench_features(model_folder(cfg, "gqa"), cfg, args))
    checks = targets(results, contexts)
    for shape, res in results.items():
        last = res["contexts"][-1]
        print(
            f"{shape}: runner {last['ratio_gqa']:.2f}x the naive loop on the same (gqa) file at context "
            f"{last['context']} ({last['ratio_gqa_vs_naive_concat']:.2f}x the naive loop on the concat file, "
            f"{last['ratio_concat']:.2f}x on the concat file itself)"
        )
    for line, ok in checks:
        print(f"target {line}: {'met' if ok else 'MISSED'}")
    # The keys at the top are the first shape's (gqa by default), for comparing runs; each shape has its own.
    first = results[shapes[0]]
    out: dict[str, Any] = {
        "bench": "lm",
        "threads": threads,
        "new_tokens": args.tokens,
        "shapes": results,
        "target_ratio": TARGET_RATIO,
        "target_roofline": TARGET_ROOFLINE,
        "first_shape": shapes[0],
        "quant": {k: first["quant"][k] for k in ("int8_over_fp32", "int4_over_fp32", "int8_cosine",
                                                 "int4_cosine", "int4_head_fp32_over_fp32")},
        "slots": {k: v for k, v in first["slots"].items() if k != "runs"},
        "speculative": {k: first["speculative"][k] for k in ("verify5_over_step1", "net_over_plain",
                                                             "accepted_per_step", "acceptance_rate")},
        "roofline": {k: first["roofline"][k] for k in ("dram_fraction", "dram_gb_s", "l3_sized_gb_s",
                                                       "best_threads")},
        "energy_j_per_token": energy_per_token(first["energy"]),
        "targets_met": all(ok for _, ok in checks),
    }  # fmt: skip
    print(json.dumps(out))
    return 0 if out["targets_met"] else 1


def energy_per_token(energy: dict[str, Any]) -> float | None:
    """The first source's joules per token (None: not measurable here)."""
    sources = energy.get("sources") or []
    return sources[0]["joules_per_token"] if energy["measurable"] and sources else None


def targets(results: dict[str, dict[str, Any]], contexts: list[int]) -> list[tuple[str, bool]]:
    """Each target, on every shape: its line and whether it is met."""
    out = []
    for shape, r in results.items():
        q, sl, sp, ro = r["quant"], r["slots"], r["speculative"], r["roofline"]
        last = r["contexts"][-1]
        out += [
            (f"{shape} runner >= {TARGET_RATIO}x the naive loop at context {last['context']} "
             f"({last['ratio_gqa']:.2f}x)", last["ratio_gqa"] >= TARGET_RATIO),
            (f"{shape} int4 >= {TARGET_INT4}x fp32 ({q['int4_over_fp32']:.2f}x; head kept fp32 "
             f"{q['int4_head_fp32_over_fp32']:.2f}x)", q["int4_over_fp32"] >= TARGET_INT4),
            (f"{shape} int8 >= {TARGET_INT8}x fp32 ({q['int8_over_fp32']:.2f}x)",
             q["int8_over_fp32"] >= TARGET_INT8),
            (f"{shape} int4 cosine >= {TARGET_COSINE['int4']} ({q['int4_cosine']:.4f})",
             q["int4_cosine"] >= TARGET_COSINE["int4"]),
            (f"{shape} int8 cosine >= {TARGET_COSINE['int8']} ({q['int8_cosine']:.4f})",
             q["int8_cosine"] >= TARGET_COSINE["int8"]),
            (f"{shape} 4 slots / 1 TPOT p95 <= {TARGET_TPOT_P95_4_OVER_1}x ({sl['tpot_p95_4_over_1']:.2f}x)",
             sl["tpot_p95_4_over_1"] <= TARGET_TPOT_P95_4_OVER_1),
            (f"{shape} verify of 5 <= {TARGET_VERIFY5}x a one-token step ({sp['verify5_over_step1']:.2f}x)",
             sp["verify5_over_step1"] <= TARGET_VERIFY5),
            (f"{shape} speculation >= {TARGET_SPEC_NET}x plain ({sp['net_over_plain']:.2f}x, acceptance "
             f"{sp['acceptance_rate']:.0%})", sp["net_over_plain"] >= TARGET_SPEC_NET),
            (f"{shape} greedy output with speculation identical to plain", bool(sp["identical"])),
            (f"{shape} fp32 >= {TARGET_ROOFLINE:.0%} of the DRAM roofline at {ro['best_threads']} thread(s) "
             f"({ro['dram_fraction']:.0%})", ro["dram_fraction"] >= TARGET_ROOFLINE),
        ]  # fmt: skip
        for context in contexts:
            want = TARGET_AGG_4_OVER_1.get(context)
            key = f"agg_4_over_1_ctx{context}"
            if want is not None:
                out.append((f"{shape} 4 slots >= {want}x one slot's aggregate at context {context} "
                            f"({sl[key]:.2f}x)", sl[key] >= want))  # fmt: skip
    return out


if __name__ == "__main__":
    raise SystemExit(main())
