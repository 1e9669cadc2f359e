"""Stops on request before and after the run: SIGINT, SIGTERM and SIGHUP mean "stop" at any
moment of ``edgepipe``'s life, not only while the graph runs.

While a graph runs, :func:`edgepipe.runtime.drive.drive` handles these signals on the event loop
(a clean drain). Outside that window, during start-up (importing ONNX Runtime, loading the
pipeline file, opening a model) and while the command finishes, the process would otherwise die
with 128 + N and no word. :func:`raise_on_stop` makes each of them raise :class:`StopRequested`
in the main thread instead, which the command turns into its documented exit code with one line.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import types
from collections.abc import Callable

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


_repeated: set[int] = set()


def _finishing(signum: int, frame: types.FrameType | None) -> None:
    """A stop request while the command finishes: the first is noted (the stop is under way);
    a second means "now", as a second Ctrl-C does everywhere: exit at once with 128 + N."""
    name = signal.Signals(signum).name
    if _repeated:
        sys.stderr.write(f"edgepipe: {name} again while finishing: exiting now\n")
        sys.stderr.flush()
        os._exit(128 + signum)
    _repeated.add(signum)
    sys.stderr.write(f"edgepipe: {name}: already stopping ({name} again to exit at once)\n")


def kept_ignored(signum: int) -> bool:
    """Whether ``signum`` stays as the process inherited it: SIGHUP inherited as ignored is
    ``nohup``'s request to outlive the session, and is kept. SIGINT and SIGTERM are always
    stops: a shell ignores SIGINT in the background jobs of a script by habit, not as a
    request, and ``kill -INT`` must still stop the run."""
    return signum == signal.SIGHUP and signal.getsignal(signum) is signal.SIG_IGN


def _install(handler: Callable[[int, types.FrameType | None], None]) -> bool:
    if threading.current_thread() is not threading.main_thread():
        return False
    for signum in STOP_SIGNALS:
        if not kept_ignored(signum):
            signal.signal(signum, handler)
    return True


def raise_on_stop() -> bool:
    """Make every stop signal raise :class:`StopRequested` in the main thread, except SIGHUP
    inherited as ignored (``nohup edgepipe run ...`` keeps running when the ssh session that
    started it closes; :func:`kept_ignored`). Returns False (and changes nothing) off the main thread, where
    Python cannot install handlers."""
    return _install(_raise)


def finishing() -> None:
    """While the command finishes after its run or after a stop (a summary, a bounded wait for
    model calls): the stop already happened, so the next request is noted, not turned into a
    traceback or 128 + N; one more after that exits at once."""
    _install(_finishing)


def after_run(before: signal._HANDLER) -> signal._HANDLER:
    """The handler to put back for a stop signal when a run that handled it ends: the
    command's start-up handler becomes :func:`finishing`'s (a signal after the run is not a
    stop "during start-up"); anything else (a library user's own) is restored as it was."""
    return _finishing if before is _raise else before


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
