# pipelines/hello.py
import asyncio
from collections.abc import AsyncIterator

from edgepipe import Message, Pipeline


async def ticks(fps: float) -> AsyncIterator[int]:
    n = 0
    while True:
        yield n
        n += 1
        await asyncio.sleep(1 / fps)


def classify(n: int) -> Message | None:  # plain functions run on a worker thread
    return Message("event", {"n": n, "even": n % 2 == 0}) if n % 5 == 0 else None


async def show(message: Message) -> None:
    print(message.data)


def pipeline(fps: float = 30.0) -> Pipeline:
    """Count ticks and report every fifth, even or odd.

    Args:
        fps: ticks per second
    """
    p = Pipeline("hello")
    src = p.source("ticks", lambda: ticks(fps))
    events = p.stage("classify", classify, inputs=src, policy="latest", queue_size=2)
    p.sink("show", show, inputs=events)
    return p
