from __future__ import annotations

import threading
import time

from edgepipe.core.native import Native, in_progress, settle


def test_settle_waits_for_native_calls_and_names_those_left() -> None:
    marker = Native("loading model m")
    release = threading.Event()

    def call() -> None:
        with marker:
            release.wait(5)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    while not in_progress():
        time.sleep(0.001)
    t0 = time.monotonic()
    assert settle(0.2) == ["loading model m"]  # still running: the caller must abandon it
    assert 0.15 < time.monotonic() - t0 < 2
    threading.Timer(0.1, release.set).start()
    assert settle(5) == []  # finished within the wait
    thread.join()


def test_a_marker_is_reentrant_and_shared_by_threads() -> None:
    marker = Native("a run of model m")
    with marker, marker:
        assert in_progress() == ["a run of model m"]
    assert in_progress() == []


def test_settle_does_not_wait_for_a_call_that_cannot_end_soon_but_names_it() -> None:
    opening = Native("opening rtsp://cam", wait=False)
    loading = Native("loading model m")
    with opening:
        t0 = time.monotonic()
        assert settle(5) == ["opening rtsp://cam"]  # the caller leaves with os._exit
        assert time.monotonic() - t0 < 1
        with loading:
            t0 = time.monotonic()
            assert settle(0.2) == ["loading model m", "opening rtsp://cam"]
            assert time.monotonic() - t0 >= 0.15  # the model call is waited for
    assert settle(0) == []
