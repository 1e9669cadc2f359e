#!/usr/bin/env python3
"""Items/s through source -> 2 stages -> sink: edgepipe's runtime against a bare asyncio.Queue chain.

Both chains have the same shape, the same queue size and the same (trivial) work per hop, and
are measured in the same run, alternating, on uvloop and on asyncio's own loop. The figure that
matters is the ratio: the machines are shared and noisy, absolute numbers are not comparable
between runs. Per-hop overhead is (1/rate_edgepipe - 1/rate_bare) / hops.

    python scripts/bench_runtime.py            # 200k items, 3 rounds each
    python scripts/bench_runtime.py --items 50000 --rounds 1

Target (issue #2): edgepipe >= 0.5x the bare chain's items/s on uvloop.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator

from edgepipe import Pipeline, run_async
from edgepipe.core.loop import loop_factory

HOPS = 3  # source->stage1, stage1->stage2, stage2->sink
QUEUE_SIZE = 64
TARGET_RATIO = 0.5


async def bare_chain(n: int) -> float:
    """The baseline: four coroutines joined by bounded asyncio.Queues, a sentinel to end."""
    end = object()
    q1: asyncio.Queue[object] = asyncio.Queue(QUEUE_SIZE)
    q2: asyncio.Queue[object] = asyncio.Queue(QUEUE_SIZE)
    q3: asyncio.Queue[object] = asyncio.Queue(QUEUE_SIZE)
    total = 0

    async def source() -> None:
        for i in range(n):
            await q1.put(i)
        await q1.put(end)

    async def stage(inbox: asyncio.Queue[object], outbox: asyncio.Queue[object]) -> None:
        while True:
            item = await inbox.get()
            if item is end:
                await outbox.put(end)
                return
            await outbox.put(item + 1)  # type: ignore[operator]

    async def sink() -> None:
        nonlocal total
        while True:
            item = await q3.get()
            if item is end:
                return
            total += item  # type: ignore[operator]

    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(source())
        tg.create_task(stage(q1, q2))
        tg.create_task(stage(q2, q3))
        tg.create_task(sink())
    elapsed = time.perf_counter() - t0
    assert total == n * (n - 1) // 2 + 2 * n, "bare chain lost items"
    return n / elapsed


async def edgepipe_chain(n: int) -> float:
    """The same shape with edgepipe's Pipeline, Channel and node runners (metrics included)."""
    total = 0

    async def source() -> AsyncIterator[int]:
        for i in range(n):
            yield i

    async def add_one(x: int) -> int:
        return x + 1

    async def sink(x: int) -> None:
        nonlocal total
        total += x

    p = Pipeline("bench")
    src = p.source("source", source)
    s1 = p.stage("stage1", add_one, inputs=src, queue_size=QUEUE_SIZE)
    s2 = p.stage("stage2", add_one, inputs=s1, queue_size=QUEUE_SIZE)
    p.sink("sink", sink, inputs=s2, queue_size=QUEUE_SIZE)
    graph = p.validate()
    t0 = time.perf_counter()
    await run_async(graph)
    elapsed = time.perf_counter() - t0
    assert total == n * (n - 1) // 2 + 2 * n, "edgepipe chain lost items"
    return n / elapsed


def measure(loop: str, n: int, rounds: int) -> dict[str, float]:
    bare: list[float] = []
    ours: list[float] = []
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        runner.run(bare_chain(n // 10))  # warm up both paths
        runner.run(edgepipe_chain(n // 10))
        for _ in range(rounds):
            bare.append(runner.run(bare_chain(n)))
            ours.append(runner.run(edgepipe_chain(n)))
    bare_rate, our_rate = statistics.median(bare), statistics.median(ours)
    return {
        "bare_items_per_s": round(bare_rate),
        "items_per_s": round(our_rate),
        "ratio_vs_bare_queue": round(our_rate / bare_rate, 3),
        "per_hop_overhead_us": round((1 / our_rate - 1 / bare_rate) / HOPS * 1e6, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    for loop in ("uvloop", "asyncio"):
        figures[loop] = m = measure(loop, args.items, args.rounds)
        ours, bare = m["items_per_s"], m["bare_items_per_s"]
        print(
            f"{loop:8s} edgepipe {ours:>10,.0f} items/s   bare queues {bare:>10,.0f} items/s   "
            f"ratio {m['ratio_vs_bare_queue']:.2f}x   overhead {m['per_hop_overhead_us']:.2f} us/hop"
        )
    ratio = figures["uvloop"]["ratio_vs_bare_queue"]
    verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
    print(f"uvloop ratio {ratio:.2f}x {verdict} the target of {TARGET_RATIO}x")
    print(
        json.dumps(
            {
                "bench": "runtime",
                "items": args.items,
                "rounds": args.rounds,
                "items_per_s": figures["uvloop"]["items_per_s"],
                "ratio_vs_bare_queue": ratio,
                "per_hop_overhead_us": figures["uvloop"]["per_hop_overhead_us"],
                "asyncio": figures["asyncio"],
                "uvloop": figures["uvloop"],
                "target_ratio": TARGET_RATIO,
                "python": sys.version.split()[0],
            }
        )
    )
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
