#!/usr/bin/env python3
"""Items/s through source -> 2 stages -> sink: edgepipe's runtime against a bare asyncio.Queue chain.

Both chains call the same user functions (an async-generator source, an ``async def`` per stage
and for the sink: :class:`Work`), with the same shape and queue size, so the ratio measures
what moves items between them and nothing else. They are measured in the same run, alternating,
on uvloop and on asyncio's own loop. The figure that matters is the ratio: the machines are
shared and noisy, absolute numbers are not comparable between runs. Per-hop overhead is
(1/rate_edgepipe - 1/rate_bare) / hops. A chain with the arithmetic inline in the queue loops
(no function calls at all) is printed as a second reference.

    python -m scripts.bench.runtime            # 200k items, 3 rounds each
    python -m scripts.bench.runtime --items 50000 --rounds 1

Target: edgepipe >= 0.8x the bare chain's items/s, on uvloop and on asyncio.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from edgepipe import Pipeline
from edgepipe.core.loop import loop_factory
from edgepipe.runner import RunConfig, run_async

HOPS = 3  # source->stage1, stage1->stage2, stage2->sink
END = object()
"""Ends a queue chain."""
Queue = asyncio.Queue[object]
QUEUE_SIZE = 64
TARGET_RATIO = 0.8


class Work:
    """The user's functions, shared by every chain: an async-generator source, an ``async def``
    per stage and for the sink. The chains differ only in what moves items between them."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.total = 0

    async def source(self) -> AsyncIterator[int]:
        for i in range(self.n):
            yield i

    async def add_one(self, x: int) -> int:
        return x + 1

    async def sink(self, x: int) -> None:
        self.total += x

    def check(self, name: str) -> None:
        n = self.n
        assert self.total == n * (n - 1) // 2 + 2 * n, f"{name} lost items"


async def _run_chain(
    n: int, source: Callable[[Queue], Awaitable[None]], stage: Callable[[Queue, Queue], Awaitable[None]],
    sink: Callable[[Queue], Awaitable[None]],
) -> float:  # fmt: skip
    """Items/s through ``source -> stage -> stage -> sink`` joined by bounded asyncio.Queues."""
    q1, q2, q3 = (Queue(QUEUE_SIZE) for _ in range(3))
    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(source(q1))
        tg.create_task(stage(q1, q2))
        tg.create_task(stage(q2, q3))
        tg.create_task(sink(q3))
    return n / (time.perf_counter() - t0)


async def bare_chain(n: int) -> float:
    """The baseline: the same functions joined by bounded asyncio.Queues, a sentinel to end."""
    work = Work(n)

    async def source(out: Queue) -> None:
        async for item in work.source():
            await out.put(item)
        await out.put(END)

    async def stage(inbox: Queue, outbox: Queue) -> None:
        while (item := await inbox.get()) is not END:
            await outbox.put(await work.add_one(item))  # type: ignore[arg-type]
        await outbox.put(END)

    async def sink(inbox: Queue) -> None:
        while (item := await inbox.get()) is not END:
            await work.sink(item)  # type: ignore[arg-type]

    rate = await _run_chain(n, source, stage, sink)
    work.check("bare chain")
    return rate


async def inline_chain(n: int) -> float:
    """A second reference, not the baseline: the arithmetic inline in the queue loops (no
    function call per stage), the most a queue chain can do."""
    total = 0

    async def source(out: Queue) -> None:
        for i in range(n):
            await out.put(i)
        await out.put(END)

    async def stage(inbox: Queue, outbox: Queue) -> None:
        while (item := await inbox.get()) is not END:
            await outbox.put(item + 1)  # type: ignore[operator]
        await outbox.put(END)

    async def sink(inbox: Queue) -> None:
        nonlocal total
        while (item := await inbox.get()) is not END:
            total += item  # type: ignore[operator]

    rate = await _run_chain(n, source, stage, sink)
    assert total == n * (n - 1) // 2 + 2 * n, "inline chain lost items"
    return rate


async def edgepipe_chain(n: int) -> float:
    """The same functions in edgepipe's Pipeline: lanes, node loops, metrics, leases."""
    work = Work(n)
    p = Pipeline("bench")
    src = p.source("source", work.source)
    s1 = p.stage("stage1", work.add_one, inputs=src, queue_size=QUEUE_SIZE)
    s2 = p.stage("stage2", work.add_one, inputs=s1, queue_size=QUEUE_SIZE)
    p.sink("sink", work.sink, inputs=s2, queue_size=QUEUE_SIZE)
    graph = p.validate()
    t0 = time.perf_counter()
    await run_async(graph, RunConfig(governed=False))
    elapsed = time.perf_counter() - t0
    work.check("edgepipe chain")
    return n / elapsed


def measure(loop: str, n: int, rounds: int) -> dict[str, float]:
    bare: list[float] = []
    ours: list[float] = []
    inline: list[float] = []
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        runner.run(bare_chain(n // 10))  # warm up every path
        runner.run(edgepipe_chain(n // 10))
        runner.run(inline_chain(n // 10))
        for _ in range(rounds):  # alternate, so drift on a shared machine hits all of them
            bare.append(runner.run(bare_chain(n)))
            ours.append(runner.run(edgepipe_chain(n)))
            inline.append(runner.run(inline_chain(n)))
    bare_rate, our_rate = statistics.median(bare), statistics.median(ours)
    inline_rate = statistics.median(inline)
    return {
        "bare_items_per_s": round(bare_rate),
        "items_per_s": round(our_rate),
        "ratio_vs_bare_queue": round(our_rate / bare_rate, 3),
        "per_hop_overhead_us": round((1 / our_rate - 1 / bare_rate) / HOPS * 1e6, 3),
        "inline_items_per_s": round(inline_rate),
        "ratio_vs_inline_queue": round(our_rate / inline_rate, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    for loop in ("uvloop", "asyncio"):
        figures[loop] = m = measure(loop, args.items, args.rounds)
        print(
            f"{loop:8s} edgepipe {m['items_per_s']:>10,.0f} items/s   "
            f"bare queues {m['bare_items_per_s']:>10,.0f} items/s   ratio {m['ratio_vs_bare_queue']:.2f}x   "
            f"overhead {m['per_hop_overhead_us']:.2f} us/hop"
        )
        print(
            f"{'':8s} (reference: queues with the arithmetic inline "
            f"{m['inline_items_per_s']:>10,.0f} items/s, ratio {m['ratio_vs_inline_queue']:.2f}x)"
        )
    ok = True
    for loop in ("uvloop", "asyncio"):
        ratio = figures[loop]["ratio_vs_bare_queue"]
        verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
        ok = ok and ratio >= TARGET_RATIO
        print(f"{loop} ratio {ratio:.2f}x {verdict} the target of {TARGET_RATIO}x")
    print(
        json.dumps(
            {
                "bench": "runtime",
                "items": args.items,
                "rounds": args.rounds,
                "items_per_s": figures["uvloop"]["items_per_s"],
                "ratio_vs_bare_queue": figures["uvloop"]["ratio_vs_bare_queue"],
                "per_hop_overhead_us": figures["uvloop"]["per_hop_overhead_us"],
                "asyncio": figures["asyncio"],
                "uvloop": figures["uvloop"],
                "target_ratio": TARGET_RATIO,
                "python": sys.version.split()[0],
            }
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
