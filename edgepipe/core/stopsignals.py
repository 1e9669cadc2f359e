"""Stops on request before and after the run: SIGINT, SIGTERM and SIGHUP mean "stop" at any
moment of ``edgepipe``'s life, not only while the graph runs.

While a graph runs, :func:`edgepipe.core.run.run_async` handles these signals on the event loop
(a clean drain). Outside that window, during start-up (importing ONNX Runtime, loading the
pipeline file, opening a model) and while the command finishes, the process would otherwise die
with 128 + N and no word. :func:`raise_on_stop` makes each of them raise :class:`StopRequested`
in the main thread instead, which the command turns into its documented exit code with one line.
"""

from __future__ import annotations

import signal
import threading
import types

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What a user, a service manager or a closing ssh session sends to stop a process."""


class StopRequested(KeyboardInterrupt):
    """A stop signal arrived outside the run's own handling. A ``KeyboardInterrupt``, so that
    libraries unwind from it as they do from Ctrl-C (asyncio re-raises it; ``finally`` runs)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


def _raise(signum: int, frame: types.FrameType | None) -> None:
    raise StopRequested(signum)


def raise_on_stop() -> bool:
    """Make every stop signal raise :class:`StopRequested` in the main thread. Returns False
    (and changes nothing) off the main thread, where Python cannot install handlers."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise)
    return True


def ignore_stops() -> None:
    """While the command finishes after its run (a summary, a bounded wait for model calls):
    the stop already happened, so a second request must not turn a clean end into 128 + N."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def stop_within(exc: BaseException) -> StopRequested | None:
    """The stop request behind ``exc``, if one is in its chain: a C extension being imported
    when the signal came turns it into ``ImportError: initialization failed``, which must not
    read as a broken pipeline file."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, StopRequested):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
