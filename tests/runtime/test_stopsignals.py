"""edgepipe/runtime/stopsignals.py: what each stop signal does before, during and after a run."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from edgepipe import Pipeline
from edgepipe.runner import RunConfig, run_async
from edgepipe.runtime import stopsignals
from edgepipe.runtime.stopsignals import STOP_SIGNALS, StopRequested, after_run, raise_on_stop, stop_within
from edgepipe.testing import FakeSource, ListSink


@pytest.fixture
def handlers() -> Iterator[None]:
    """The test process's own handlers, put back whatever the test installs."""
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def test_sighup_inherited_as_ignored_stays_ignored_sigint_does_not(handlers: None) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell does to a script's `cmd &`: a habit
    assert raise_on_stop()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is stopsignals._raise  # `kill -INT` still stops it
    with pytest.raises(StopRequested) as stop:
        signal.raise_signal(signal.SIGTERM)
    assert stop.value.name == "SIGTERM"


async def test_a_run_puts_back_what_was_there_and_the_start_up_handler_becomes_finishing(
    handlers: None,
) -> None:
    def own(signum: int, frame: object) -> None: ...

    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, own)
    signal.signal(signal.SIGTERM, stopsignals._raise)
    p = Pipeline("t")
    p.sink("out", ListSink(), inputs=p.source("numbers", FakeSource([1, 2])))
    await run_async(p, RunConfig(governed=False, handle_signals=True))
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN  # never taken over
    assert signal.getsignal(signal.SIGINT) is own
    assert signal.getsignal(signal.SIGTERM) is stopsignals._finishing  # not "during start-up" any more


def test_after_run_keeps_a_users_own_handler() -> None:
    assert after_run(signal.SIG_DFL) is signal.SIG_DFL
    assert after_run(stopsignals._raise) is stopsignals._finishing


def test_a_stop_hidden_in_an_import_error_is_found() -> None:
    stop = StopRequested(signal.SIGTERM)
    error = ImportError("initialization failed")  # what a C extension says when the signal lands in it
    error.__context__ = stop
    assert stop_within(error) is stop
    assert stop_within(ValueError("x")) is None
