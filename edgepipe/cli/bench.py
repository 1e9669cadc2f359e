"""``edgepipe bench lm MODEL``: a language model's prefill and decode speeds, and its roofline."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from edgepipe.cli.failures import error, say
from edgepipe.core.units import whole


def add_parser(sub: Any) -> None:
    bench_p = sub.add_parser(
        "bench",
        help="measure a model on this machine",
        description="Measure a model here, against what the hardware allows.",
        allow_abbrev=False,
    )
    kinds = bench_p.add_subparsers(dest="kind", metavar="KIND", required=True)
    lm_p = kinds.add_parser(
        "lm",
        help="a decoder language model: prefill tok/s, time to first token, time per token, roofline",
        description="Greedy generation after random prompts of each context length. Decode speed is "
        "set against the memory roofline: read bandwidth measured here / weight bytes read per token.",
    )
    lm_p.add_argument(
        "model", help="a folder with model.onnx (and tokenizer.json, config.json) or an .onnx file"
    )
    lm_p.add_argument(
        "--contexts",
        default=None,
        help="prompt lengths, comma-separated (default 128,512, each cut to what the model's cache "
        "buffer holds)",
    )
    lm_p.add_argument(
        "--tokens", type=whole(1), default=32, help="tokens to generate after each prompt (default 32)"
    )
    lm_p.add_argument(
        "--max-seq-len",
        type=whole(1),
        default=None,
        metavar="N",
        help="positions of the KV cache (default: what the longest prompt and its tokens need; at most "
        "the model's cache buffer, where its graph fixes one)",
    )
    lm_p.add_argument(
        "--threads", type=int, default=None, help="intra-op threads (default: 70%% of the cores)"
    )
    lm_p.add_argument(
        "--slots", default="1", help="also decode N requests at once, for each N (e.g. 1,2,4); 1: not"
    )
    lm_p.add_argument(
        "--speculate-prompts", type=int, default=0,
        help="also compare speculative and plain decoding on N description prompts (0: not)",
    )  # fmt: skip
    lm_p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: a table for people (default); json: one JSON object with every figure",
    )


def main(args: argparse.Namespace) -> int:
    from edgepipe.deploy.power.meter import EnergyMeter, energy_json, energy_lines
    from edgepipe.infer import InferError
    from edgepipe.infer.session import SessionConfig
    from edgepipe.lm.bench import report
    from edgepipe.lm.generate import LanguageModel

    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    try:
        slot_counts = _numbers("--slots", args.slots)
        fitted = _fit(args, max(slot_counts))
    except (InferError, ValueError) as exc:  # a wrong option or model, before anything runs
        error(str(exc))
        return EXIT_USAGE
    contexts, max_seq, buffer = fitted
    try:
        lm = LanguageModel(
            args.model, max_seq_len=max_seq, session=SessionConfig(threads=args.threads, timeout_s=300)
        )
        meter = EnergyMeter()
        figures = report(lm, contexts, args.tokens, meter=meter)
        if slot_counts != [1]:
            figures["slots"] = slot_rows(args, contexts, max_seq, slot_counts)
        if args.speculate_prompts > 0:
            # description prompts are longer than most bench prompts: a longer cache, where it may be
            spec_len = max(max_seq, 512) if buffer is None else min(max(max_seq, 512), buffer)
            figures["speculative"] = speculation(args, spec_len)
    except (InferError, ValueError) as exc:
        error(str(exc))
        return EXIT_FAILED
    # Energy of the timed runs (prefill included), per generated token.
    figures["energy"] = energy_json(meter, meter.energies, args.tokens * len(contexts), "token")
    if args.format == "json":
        print(json.dumps(figures))
        return EXIT_OK
    print(f"model {figures['model']} ({figures['cache']} KV cache, {figures['kv_cache_mb']} MB, "
          f"{figures['threads']} thread(s))")  # fmt: skip
    print(f"{'context':>8} {'prefill ms':>11} {'prefill tok/s':>14} {'TTFT ms':>9} {'TPOT ms':>9} "
          f"{'p95 ms':>8} {'decode tok/s':>13} {'roofline':>9}")  # fmt: skip
    for row in figures["contexts"]:
        print(f"{row['context']:>8} {row['prefill_ms']:>11.1f} {row['prefill_tokens_per_s']:>14.1f} "
              f"{row['ttft_ms']:>9.1f} {row['tpot_ms']:>9.2f} {row['tpot_p95_ms']:>8.2f} "
              f"{row['decode_tokens_per_s']:>13.1f} {row['roofline_fraction']:>9.0%}")  # fmt: skip
    print(f"\nmemory read bandwidth {figures['memory_gb_per_s']} GB/s; weights read per token "
          f"{figures['weight_mb_per_token']} MB; "
          f"roofline {figures['roofline_tokens_per_s']} tok/s")  # fmt: skip
    for line in energy_lines(figures["energy"], "token"):
        print(line)
    for row in figures.get("slots", []):
        print(f"{row['slots']} request(s) at once, context {row['context']}: {row['aggregate_tokens_per_s']} "
              f"tok/s in all, TPOT p95 {row['tpot_p95_ms']} ms")  # fmt: skip
    if "speculative" in figures:
        sp = figures["speculative"]
        print(f"speculative decoding on {sp['prompts']} description prompts: {sp['net_over_plain']}x plain, "
              f"{sp['accepted_per_step']} drafts kept a verify step "
              f"(outputs identical: {sp['identical']})")  # fmt: skip
    return EXIT_OK


def _numbers(flag: str, text: str) -> list[int]:
    """``"128,512"`` as sorted distinct positive numbers; ValueError naming ``flag`` otherwise."""
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        values = []
    if not values or values[0] < 1:
        raise ValueError(f"{flag} takes positive numbers like 128,512, not {text!r}")
    return values


def _fit(args: argparse.Namespace, slots: int) -> tuple[list[int], int, int | None]:
    """(prompt lengths, KV cache positions, the model's fixed cache buffer or None) that fit the
    model: the defaults cut to its cache buffer; ValueError naming the option and the value that
    fits where a given one does not."""
    from pathlib import Path

    from edgepipe.lm.bench import DEFAULT_CONTEXTS, cache_buffer, longest_context, positions_needed

    buffer = cache_buffer(Path(args.model))
    if args.max_seq_len is not None and buffer is not None and args.max_seq_len > buffer:
        raise ValueError(
            f"--max-seq-len {args.max_seq_len}: the model's cache buffer holds {buffer} positions; "
            f"give --max-seq-len {buffer} or less, or leave it out"
        )
    limit = args.max_seq_len or buffer
    asked = DEFAULT_CONTEXTS if args.contexts is None else _numbers("--contexts", args.contexts)
    if limit is not None and longest_context(limit, args.tokens, slots) < 1:
        # The most tokens that leave the shortest prompt asked for whole (else a 1-token prompt).
        most = next((t for p in (min(asked), 1) for t in range(limit, 0, -1)
                     if positions_needed([p], t, slots) <= limit), 0)  # fmt: skip
        raise ValueError(
            f"--tokens {args.tokens}: a prompt and its tokens do not fit the {limit} positions of "
            f"{_limit_name(args)}; give --tokens {most} or less"
        )
    if args.contexts is None:
        longest = longest_context(limit, args.tokens, slots) if limit is not None else max(DEFAULT_CONTEXTS)
        contexts = sorted({min(c, longest) for c in DEFAULT_CONTEXTS})
        if contexts != sorted(DEFAULT_CONTEXTS):  # said, so that a short prompt is no surprise
            cut = ", ".join(map(str, contexts))
            say(f"bench lm: prompts of {cut} tokens, cut to fit the {limit} positions of "
                f"{_limit_name(args)} with --tokens {args.tokens} (--contexts to choose)")  # fmt: skip
    else:
        contexts = _numbers("--contexts", args.contexts)
    need = positions_needed(contexts, args.tokens, slots)
    if limit is not None and need > limit:
        longest = longest_context(limit, args.tokens, slots)
        raise ValueError(
            f"--contexts {args.contexts}: a prompt of {max(contexts)} and --tokens {args.tokens} need "
            f"{need} positions, {_limit_name(args)} holds {limit}; give --contexts of at most {longest}"
        )
    return contexts, args.max_seq_len or need, buffer


def _limit_name(args: argparse.Namespace) -> str:
    return f"--max-seq-len {args.max_seq_len}" if args.max_seq_len is not None else "the model's cache buffer"


def slot_rows(
    args: argparse.Namespace, contexts: list[int], max_seq: int, counts: list[int]
) -> list[dict[str, Any]]:
    """Steady decoding of N requests at once (greedy, speculation off), per context and N."""
    from edgepipe.infer.session import SessionConfig
    from edgepipe.lm.bench import random_prompt, slot_figures, slot_room
    from edgepipe.lm.generate import LanguageModel

    room = slot_room(64, [[0] * max(contexts)] * max(counts)) + args.tokens + max(contexts)
    lm = LanguageModel(args.model, max_seq_len=max(max_seq, room), slots=max(counts), speculate=0,
                       session=SessionConfig(threads=args.threads, timeout_s=300))  # fmt: skip
    rows = []
    try:
        for context in contexts:
            for n in counts:
                row = slot_figures(lm, [random_prompt(lm, context, seed=i) for i in range(n)], args.tokens)
                rows.append({"context": context, **row})
    finally:
        lm.close()
    return rows


def speculation(args: argparse.Namespace, max_seq: int) -> dict[str, Any]:
    """Speculative against plain decoding on description prompts (see :mod:`edgepipe.lm.bench`)."""
    from edgepipe.infer.session import SessionConfig
    from edgepipe.lm.bench import description_prompts, speculation_figures
    from edgepipe.lm.generate import LanguageModel

    config = SessionConfig(threads=args.threads, timeout_s=300)
    plain = LanguageModel(args.model, max_seq_len=max_seq, session=config, speculate=0)
    spec = LanguageModel(args.model, max_seq_len=max_seq, session=config)
    try:
        return speculation_figures(
            plain, spec, description_prompts(plain, args.speculate_prompts), args.tokens
        )
    finally:
        plain.close()
        spec.close()
