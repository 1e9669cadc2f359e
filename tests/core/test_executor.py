from __future__ import annotations

import threading
import time

from edgepipe.core.executor import DaemonThreadPool, Resources


def test_workers_are_daemons_and_shutdown_never_waits_for_a_hung_call() -> None:
    pool = DaemonThreadPool(2, "vdec")
    hang = threading.Event()
    hung = pool.submit(hang.wait, 10)
    assert pool.submit(lambda: 41 + 1).result(timeout=5) == 42
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("edgepipe-vdec"))
    t0 = time.monotonic()
    pool.shutdown(wait=False, cancel_futures=True)
    assert time.monotonic() - t0 < 0.5
    hang.set()
    assert hung.result(timeout=5) is True


def test_resources_size_pools_by_name() -> None:
    resources = Resources({"npu": 1})
    assert resources.workers("npu") == 1
    assert resources.workers("cpu") >= 1
    assert resources.executor("npu") is resources.executor("npu")
    resources.shutdown()
