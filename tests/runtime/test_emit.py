"""Emission: every consumer gets the item, and a pooled item's shares all come back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from edgepipe import Pipeline
from edgepipe.core.lease import Leased
from edgepipe.runner import RunConfig, run_async
from edgepipe.testing import ListSink


class Slot(Leased):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n


async def test_fanning_out_to_consumers_that_have_all_gone_leaks_no_share() -> None:
    made: list[Slot] = []

    async def source() -> AsyncIterator[Slot]:
        for n in range(50):
            made.append(Slot(n))
            yield made[-1]
            await asyncio.sleep(0.001)

    async def first_only(items: AsyncIterator[Slot]) -> AsyncIterator[int]:
        async for item in items:  # stops early: its inbox detaches
            yield item.n
            return

    p = Pipeline()
    src = p.source("src", source)
    p.sink("a_out", ListSink(), inputs=p.stage("a", first_only, inputs=src))
    p.sink("b_out", ListSink(), inputs=p.stage("b", first_only, inputs=src))
    await run_async(p, RunConfig(governed=False))
    assert [s.n for s in made if s.refs > 0] == []
