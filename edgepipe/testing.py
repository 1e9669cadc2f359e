"""Helpers for testing your own pipelines and nodes: fake sources, list sinks, one-call runs.

::

    from edgepipe import Pipeline
    from edgepipe.testing import FakeSource, ListSink, run_pipeline

    def test_doubles() -> None:
        sink = ListSink()
        p = Pipeline("t")
        src = p.source("numbers", FakeSource([1, 2, 3]))
        p.sink("out", sink, inputs=p.stage("double", lambda x: x * 2, inputs=src))
        run_pipeline(p)
        assert sink.items == [2, 4, 6]

``run_pipeline`` is :func:`edgepipe.run`: the run a test gets is the production one, governed
by default; a test that wants the governor out of the way says ``RunConfig(governed=False)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Generic, TypeVar

from edgepipe.graph.pipeline import Pipeline
from edgepipe.runner import RunConfig, run
from edgepipe.runtime.engine import RunReport

T = TypeVar("T")

__all__ = ["FakeSource", "ListSink", "run_pipeline"]


class FakeSource(Generic[T]):
    """Yields ``items`` (``interval_s`` apart when given), then ends; ``repeat`` loops forever.

    ``fail_at`` raises ``RuntimeError`` before yielding that index, once per :meth:`__aiter__`
    call, to exercise error policies. It is restartable: each iteration starts from the top.
    """

    def __init__(
        self,
        items: Iterable[T],
        *,
        interval_s: float = 0.0,
        repeat: bool = False,
        fail_at: int | None = None,
    ) -> None:
        self.items: list[T] = list(items)
        self.interval_s = interval_s
        self.repeat = repeat
        self.fail_at = fail_at
        self.opened = 0

    async def __aiter__(self) -> AsyncIterator[T]:
        self.opened += 1
        fail_at = self.fail_at if self.opened == 1 else None
        while True:
            for i, item in enumerate(self.items):
                if i == fail_at:
                    raise RuntimeError(f"FakeSource failing at item {i} as asked")
                if self.interval_s:
                    await asyncio.sleep(self.interval_s)
                yield item
            if not self.repeat:
                return


class ListSink(Generic[T]):
    """Collects every item it receives in ``items``; ``delay_s`` makes it a slow consumer."""

    def __init__(self, *, delay_s: float = 0.0) -> None:
        self.items: list[T] = []
        self.delay_s = delay_s
        self.started = False
        self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def process(self, item: T) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.items.append(item)


def run_pipeline(pipeline: Pipeline, config: RunConfig | None = None) -> RunReport:
    """Validate and run ``pipeline`` to the end (or for ``config.duration_s``) on a fresh event
    loop: :func:`edgepipe.run` itself, so a test runs what production runs (governed unless
    ``RunConfig(governed=False)``)."""
    return run(pipeline, config)
