from __future__ import annotations

import sys
import threading
import time

from edgepipe.core.errors import ExitCalled
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


def test_a_call_that_calls_sys_exit_fails_its_future_and_leaves_the_process_alone() -> None:
    pool = DaemonThreadPool(1, name="exits")
    future = pool.submit(sys.exit, 3)
    error = future.exception(timeout=5)
    assert isinstance(error, ExitCalled)
    assert error.code == 3
    assert "called sys.exit(3)" in str(error)
    assert pool.submit(lambda: 7).result(timeout=5) == 7  # its worker lived on
    pool.shutdown(wait=False)
