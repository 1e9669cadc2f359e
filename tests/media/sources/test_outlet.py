from __future__ import annotations

import asyncio
import logging
import threading

import numpy as np
import pytest

from edgepipe.media.errors import SourceError
from edgepipe.media.frame import FramePool, from_planes
from edgepipe.media.sources.handoff import Handoff
from edgepipe.media.sources.outlet import Outlet
from edgepipe.media.status import SourceStatus
from edgepipe.planning.memory import MemoryBudgetError


def _outlet(
    loop: asyncio.AbstractEventLoop, pool: FramePool | None = None, stop: threading.Event | None = None
) -> tuple[Outlet, Handoff]:
    handoff = Handoff(loop)
    outlet = Outlet("cam.mp4", SourceStatus("cam"), pool or FramePool(2), handoff, stop or threading.Event())
    return outlet, handoff


async def test_a_producer_that_returns_ends_the_source_after_what_it_posted() -> None:
    outlet, handoff = _outlet(asyncio.get_running_loop())

    def produce() -> None:
        outlet.set_state("live")
        outlet.set_state("live")  # no change, nothing to tell
        outlet.set_state("ended", "60 frames")

    outlet.run(produce)
    assert [await handoff.get() for _ in range(3)] == [
        ("state", ("live", "")),
        ("state", ("ended", "60 frames")),
        ("end", None),
    ]


async def test_what_a_producer_raises_becomes_the_sources_error_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outlet, handoff = _outlet(asyncio.get_running_loop())
    own = SourceError("no such file", url="cam.mp4")

    def raise_(exc: BaseException) -> None:
        raise exc

    outlet.run(lambda: raise_(own))
    assert await handoff.get() == ("error", own)

    outlet.run(lambda: raise_(MemoryBudgetError("too big", owner="cam", needed_bytes=2, budget_bytes=1)))
    kind, error = await handoff.get()
    assert kind == "error"
    assert isinstance(error, SourceError)
    assert (str(error), error.retryable) == ("cam.mp4: too big", False)

    with caplog.at_level(logging.ERROR):
        outlet.run(lambda: raise_(KeyError("bug")))
    kind, error = await handoff.get()
    assert isinstance(error, SourceError)
    assert (str(error), error.retryable) == ("cam.mp4: decode thread failed: KeyError('bug')", True)
    assert "decode thread failed" in caplog.text  # with its traceback


def test_a_frame_posted_after_the_loop_closed_goes_back_to_the_pool() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    pool = FramePool(1)
    outlet, _ = _outlet(loop, pool)
    slot = pool.try_acquire()
    assert slot is not None
    y, uv = np.zeros((4, 4), np.uint8), np.zeros((2, 2, 2), np.uint8)
    assert outlet.post(from_planes(y, uv, pool=pool, slot=slot)) is False
    assert pool.in_use == 0


async def test_wait_ends_at_once_when_stopped() -> None:
    stop = threading.Event()
    outlet, _ = _outlet(asyncio.get_running_loop(), stop=stop)
    assert outlet.wait(0.001) is False
    assert outlet.stopped is False
    stop.set()  # as VideoSource.stop does
    assert outlet.stopped is True
    assert outlet.wait(60) is True
