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

from edgepipe.infer.footprint import read_io, read_weights
from edgepipe.lm.generate import LanguageModel
from edgepipe.lm.kv_sizing import model_files, settle_layout
from edgepipe.lm.layout import file_layout
from edgepipe.lm.sampling import SamplingParams

CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
"""Where Linux describes the first CPU's caches: ``index*/level`` and ``index*/size``."""
ASSUMED_L3_BYTES = 32 * 1024 * 1024
"""The last-level cache taken where the system does not say (not Linux, no sysfs)."""
DEFAULT_CONTEXTS = (128, 512)
"""Prompt lengths benched unless told (each cut to what the model's cache buffer holds)."""


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


def last_level_cache_bytes(caches: Path = CPU_CACHES) -> int:
    """The size of this machine's last-level cache: the first CPU's level 3 (or its highest
    level, where there is no L3), from sysfs; :data:`ASSUMED_L3_BYTES` where it cannot be read."""
    sizes: dict[int, int] = {}
    for index in caches.glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
            size = int(text.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        except (OSError, ValueError):
            continue
        sizes[level] = max(size, sizes.get(level, 0))
    return sizes[max(sizes)] if sizes else ASSUMED_L3_BYTES


def cache_sized_mb(caches: Path = CPU_CACHES) -> int:
    """A buffer, in MB (:func:`memory_bandwidth`'s ``size_mb``), that the last-level cache holds
    with room to spare: half of it (16 MB of a 32 MiB L3), at least 1. Its read bandwidth is the
    cache's, not DRAM's: shown beside DRAM's."""
    return max(1, last_level_cache_bytes(caches) // 2 // 1_000_000)


def weight_bytes_per_token(model_file: Path) -> int:
    """Bytes of weights one decode step reads: every weight once as stored (fp16 2 bytes, packed
    4-bit half a byte ...), one row of the embedding (:func:`edgepipe.infer.footprint.read_weights`,
    the count ``edgepipe plan`` uses too)."""
    return read_weights(model_file).per_token_bytes


# -- what a run needs of the model's cache ------------------------------------------------------


def cache_buffer(model: Path) -> int | None:
    """Positions of the model's cache buffer where its graph fixes them (a GroupQueryAttention
    export's shared buffer); None where the runner makes the buffer as long as it is asked. Read
    from the file, no session made. Raises :class:`~edgepipe.infer.ModelNotFound`,
    :class:`~edgepipe.infer.ModelLoadError` or :class:`~edgepipe.lm.DecoderLayoutError`."""
    folder, file = model_files(model)
    inputs, outputs = read_io(file)
    layout, _ = settle_layout(file_layout(inputs, outputs, str(model)), file, folder, str(model))
    return layout.model_max_seq if layout.cache == "shared" else None


def positions_needed(contexts: list[int], new_tokens: int, slots: int = 1, prefill_chunk: int = 64) -> int:
    """Cache positions a bench of these prompt lengths needs: the longest prompt, its new tokens
    and one more; with several ``slots``, also what a request writes while the others' prompts
    go in (:func:`slot_room`)."""
    longest = max(contexts)
    need = longest + new_tokens + 1
    if slots > 1:
        need = max(need, longest + new_tokens + slot_room(prefill_chunk, [[0] * longest] * slots))
    return need


def longest_context(limit: int, new_tokens: int, slots: int = 1) -> int:
    """The longest prompt whose bench fits ``limit`` positions (:func:`positions_needed`); 0
    where not even one token does."""
    low, high = 0, limit
    while low < high:  # the largest c with positions_needed([c]) <= limit; 0 fits trivially
        mid = (low + high + 1) // 2
        if positions_needed([mid], new_tokens, slots) <= limit:
            low = mid
        else:
            high = mid - 1
    return low


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
    bandwidth = memory_bandwidth()  # a buffer larger than the last-level cache: DRAM's
    cached = memory_bandwidth(size_mb=cache_sized_mb())  # fits the last-level cache: shown beside it
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
        "memory_gb_per_s_l3_sized": round(cached / 1e9, 2),
        "roofline_tokens_per_s": round(bandwidth / weights, 1),
        "contexts": rows,
    }


# -- several requests, speculation, the cost of a wide step --------------------------------------


def random_prompt(lm: LanguageModel, length: int, seed: int = 0) -> list[int]:
    """``length`` byte tokens (they exist in every vocabulary edgepipe builds)."""
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, min(lm.runner.vocab, 256), length)]


def slot_figures(lm: LanguageModel, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
    """``len(prompts)`` greedy requests joined at once on ``lm.decoder``: their prompts go in
    (each request's TTFT counts its wait behind the others'), then ``new_tokens`` steps of all
    of them decoding together are timed. ``aggregate_tokens_per_s``: tokens of all requests
    over those steps; per request: TTFT, TPOT p50/p95 and tokens/s over those steps. The model
    needs room for each prompt + ``new_tokens`` + the tokens written while the others read
    theirs (:func:`slot_room`)."""
    decoder = lm.decoder
    runner = lm.runner
    params = SamplingParams(
        max_new_tokens=new_tokens + slot_room(runner.prefill_chunk, prompts), ignore_eos=True
    )
    requests = [decoder.join(p, params, stop_ids=lm.stop_ids) for p in prompts]
    while not all(r.stats.new_tokens for r in requests):
        decoder.step()
    start = [len(r.stats.token_ms) for r in requests]
    t0 = time.perf_counter()
    for _ in range(new_tokens):
        decoder.step()
    seconds = time.perf_counter() - t0
    per = []
    for r, first in zip(requests, start, strict=True):
        token_ms = r.stats.token_ms[first:]
        decoder.leave(r)
        per.append({
            "ttft_ms": round(r.stats.ttft_ms, 2), "tpot_p50_ms": round(float(np.median(token_ms)), 3),
            "tpot_p95_ms": round(float(np.percentile(token_ms, 95)), 3),
            "tokens_per_s": round(1000 / float(np.mean(token_ms)), 2),
        })  # fmt: skip
    return {
        "slots": len(prompts),
        "aggregate_tokens_per_s": round(len(prompts) * new_tokens / seconds, 2),
        "tpot_p95_ms": max(p["tpot_p95_ms"] for p in per),
        "requests": per,
    }


def slot_room(prefill_chunk: int, prompts: list[list[int]]) -> int:
    """Tokens a request may write while the others' prompts go in (a chunk a step), at most."""
    return sum(-(-len(p) // prefill_chunk) for p in prompts) + 1


def verify_cost(lm: LanguageModel, context: int, width: int = 5, reps: int = 20) -> dict[str, float]:
    """Median time of one step feeding ``width`` positions against one feeding 1, both after
    ``context`` cached positions of slot 0 (each step rewound after it; the two alternate so
    drift hits both)."""
    runner = lm.runner
    if context + width > runner.max_seq_len:
        raise ValueError(f"context {context} + {width} does not fit max_seq_len={runner.max_seq_len}")
    runner.begin(0)
    runner.feed(random_prompt(lm, context, seed=1))
    wide, one = random_prompt(lm, width, seed=2), random_prompt(lm, 1, seed=3)
    times: dict[int, list[float]] = {1: [], width: []}
    for _ in range(reps):
        for fed in (one, wide):
            t0 = time.perf_counter()
            runner.step((0,), (fed,))
            times[len(fed)].append(time.perf_counter() - t0)
            runner.rewind(0, len(fed))
    runner.end(0)
    step1, stepw = (float(np.median(times[k])) * 1000 for k in (1, width))
    return {"width": width, "step1_ms": round(step1, 3), "verify_ms": round(stepw, 3),
            "ratio": round(stepw / step1, 3)}  # fmt: skip


def greedy_run(lm: LanguageModel, prompt: list[int], new_tokens: int) -> tuple[list[int], float]:
    """Greedy tokens and decode tokens/s (the wall clock from the first token to the last)."""
    out: list[int] = []
    t0 = 0.0
    for token in lm.tokens(prompt, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)):
        out.append(token)
        if len(out) == 1:
            t0 = time.perf_counter()
    seconds = time.perf_counter() - t0
    return out, (len(out) - 1) / seconds if seconds > 0 and len(out) > 1 else 0.0


def speculation_figures(
    plain: LanguageModel, spec: LanguageModel, prompts: list[list[int]], new_tokens: int
) -> dict[str, Any]:
    """The same greedy requests on a model with speculation off (``plain``) and on (``spec``),
    alternating: decode tokens/s of each (summed over the prompt set), whether every output is
    the same, and the drafts' acceptance (``spec.decoder.speculation``)."""
    seconds = {"plain": 0.0, "spec": 0.0}
    tokens = 0
    identical = True
    before = spec.decoder.speculation
    drafted0, accepted0, verify0 = before.drafted, before.accepted, before.verify_steps
    for prompt in prompts:
        a, rate_a = greedy_run(plain, prompt, new_tokens)
        b, rate_b = greedy_run(spec, prompt, new_tokens)
        identical &= a == b
        tokens += len(a) - 1
        seconds["plain"] += (len(a) - 1) / rate_a if rate_a else 0.0
        seconds["spec"] += (len(b) - 1) / rate_b if rate_b else 0.0
    s = spec.decoder.speculation
    drafted, accepted, verify = s.drafted - drafted0, s.accepted - accepted0, s.verify_steps - verify0
    plain_rate = tokens / seconds["plain"] if seconds["plain"] else 0.0
    spec_rate = tokens / seconds["spec"] if seconds["spec"] else 0.0
    return {
        "prompts": len(prompts),
        "plain_tokens_per_s": round(plain_rate, 2),
        "spec_tokens_per_s": round(spec_rate, 2),
        "net_over_plain": round(spec_rate / plain_rate, 3) if plain_rate else 0.0,
        "accepted_per_step": round(accepted / verify, 3) if verify else 0.0,
        "acceptance_rate": round(accepted / drafted, 3) if drafted else 0.0,
        "verify_steps": verify,
        "identical": identical,
    }


def logits_cosine(reference: LanguageModel, other: LanguageModel, prompt: list[int]) -> float:
    """Mean cosine similarity of the two models' logits at every position of ``prompt`` (fed in
    one step: at most ``prefill_chunk`` tokens)."""
    rows = []
    for lm in (reference, other):
        lm.runner.begin(0)
        rows.append(np.array(lm.runner.step((0,), (prompt,))[0], np.float64))
        lm.runner.end(0)
    a, b = rows
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.mean())


def description_prompts(lm: LanguageModel, count: int, seed: int = 0) -> list[list[int]]:
    """``count`` prompts as ``Describe`` builds them: its default template over a detector
    summary and camera states written the way :class:`~edgepipe.lm.scene.SceneWindow` writes
    them, in the model's chat format where it has one."""
    from edgepipe.lm.describe import DEFAULT_TEMPLATE

    rng = np.random.default_rng(seed)
    labels = ["person", "car", "bicycle", "dog", "truck", "backpack"]
    cameras = ["front-door", "yard", "garage", "street"]
    out = []
    for _ in range(count):
        frames = int(rng.integers(20, 60))
        seen = rng.choice(labels, size=int(rng.integers(1, 4)), replace=False)
        summary = ", ".join(
            f"{label} in {rng.integers(1, frames)} of {frames} frames (up to {rng.integers(1, 4)} at once)"
            for label in seen
        )
        camera = cameras[int(rng.integers(len(cameras)))]
        state = f"{camera}: playing, {frames / 10:.1f} frames/s analysed"
        text = DEFAULT_TEMPLATE.format(seconds=10.0, summary=f"{summary}; camera {state}")
        out.append(lm.prompt_ids(text, chat=True))
    return out
