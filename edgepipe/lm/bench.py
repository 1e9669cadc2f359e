"""Measuring a decoder honestly: prefill and decode apart, and against the memory roofline.

Decoding one token reads every weight once (batch size 1), so its speed is bounded by memory
bandwidth: tokens/s <= bandwidth / weight bytes. :func:`memory_bandwidth` measures what this
machine can read per second; :func:`measure` runs prompts of several lengths and reports
time to first token, prefill tokens/s, time per output token and decode tokens/s for each.
``edgepipe bench lm MODEL`` prints both and the fraction of the roofline reached.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgepipe.infer.footprint import read_weights
from edgepipe.lm.generate import LanguageModel
from edgepipe.lm.sampling import SamplingParams


@dataclass(frozen=True, slots=True)
class ContextFigures:
    context: int
    """Prompt length in tokens."""
    prefill_ms: float
    prefill_tokens_per_s: float
    ttft_ms: float
    tpot_ms: float
    tpot_p95_ms: float
    decode_tokens_per_s: float


class Meter(Protocol):
    """Measures something over the timed runs (an energy meter: ``edgepipe.deploy.power.meter``)."""

    def start(self) -> None: ...
    def stop(self) -> object: ...


def memory_bandwidth(size_mb: int = 256, rounds: int = 5) -> float:
    """Attainable read bandwidth in bytes/s: the fastest of ``rounds`` passes over a buffer far
    larger than the caches, read by SIMD reductions that do too little arithmetic to be the
    bottleneck (numpy's ``max``; a BLAS dot product). ``sum`` is not used: its pairwise
    summation is compute-bound here and reads 40% slower than memory allows."""
    data = np.ones(size_mb * 1_000_000 // 4, np.float32)
    data.max()  # fault the pages in

    def dot() -> object:
        return data.dot(data)

    best = float("inf")
    for _ in range(rounds):
        for read in (data.max, dot):
            t0 = time.perf_counter()
            read()
            best = min(best, time.perf_counter() - t0)
    return data.nbytes / best


def weight_bytes_per_token(model_file: Path) -> int:
    """Bytes of weights one decode step reads: every weight once as stored (fp16 2 bytes, packed
    4-bit half a byte ...), one row of the embedding (:func:`edgepipe.infer.footprint.read_weights`,
    the count ``edgepipe plan`` uses too)."""
    return read_weights(model_file).per_token_bytes


def measure(
    lm: LanguageModel, contexts: list[int], new_tokens: int = 32, seed: int = 0, meter: Meter | None = None
) -> list[ContextFigures]:
    """Greedy runs of ``new_tokens`` after random prompts of each length (one warm-up first);
    ``meter`` is started after the warm-up and stopped after the last run."""
    rng = np.random.default_rng(seed)
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    vocab = min(lm.runner.vocab, 256)  # byte tokens exist in every vocabulary edgepipe builds
    list(lm.tokens(rng.integers(0, vocab, 8).tolist(), SamplingParams(max_new_tokens=4, ignore_eos=True)))
    out = []
    if meter is not None:
        meter.start()
    for context in contexts:
        prompt = rng.integers(0, vocab, context).tolist()
        list(lm.tokens(prompt, params))
        s = lm.stats
        out.append(ContextFigures(
            context=context, prefill_ms=s.prefill_ms, prefill_tokens_per_s=context / (s.prefill_ms / 1000),
            ttft_ms=s.ttft_ms, tpot_ms=s.tpot_ms, tpot_p95_ms=s.tpot_p95_ms,
            decode_tokens_per_s=s.decode_tokens_per_s,
        ))  # fmt: skip
    if meter is not None:
        meter.stop()
    return out


def report(
    lm: LanguageModel, contexts: list[int], new_tokens: int = 32, meter: Meter | None = None
) -> dict[str, Any]:
    """Everything ``edgepipe bench lm`` prints, as one mapping (the JSON line)."""
    figures = measure(lm, contexts, new_tokens, meter=meter)
    bandwidth = memory_bandwidth()
    weights = weight_bytes_per_token(lm.runner.session.path)
    rows = []
    for f in figures:
        row = asdict(f)
        row["roofline_fraction"] = round(weights * f.decode_tokens_per_s / bandwidth, 3)
        rows.append(row)
    return {
        "bench": "lm",
        "model": str(lm.runner.folder),
        "cache": lm.runner.layout.cache,
        "threads": lm.runner.session.threads,
        "kv_cache_mb": round(lm.runner.cache.nbytes / 1e6, 2),
        "weight_mb_per_token": round(weights / 1e6, 2),
        "memory_gb_per_s": round(bandwidth / 1e9, 2),
        "roofline_tokens_per_s": round(bandwidth / weights, 1),
        "contexts": rows,
    }
