"""Driving a built :class:`~edgepipe.runtime.engine.Runtime` from start to stop: the run's timer
and its stop signals.

:func:`edgepipe.run` (:mod:`edgepipe.runner`) builds the runtime from its
:class:`~edgepipe.runner.RunConfig` and drives it here; nothing else runs a graph."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Sequence

from edgepipe.runtime.engine import RunReport, Runtime, Watcher
from edgepipe.runtime.stopsignals import STOP_SIGNALS, after_run, kept_ignored

log = logging.getLogger(__name__)


async def drive(
    runtime: Runtime,
    watchers: Sequence[Watcher] = (),
    *,
    duration_s: float | None = None,
    handle_signals: bool = False,
) -> RunReport:
    """Run ``runtime`` on the running loop to its end, with ``watchers`` beside its nodes.

    ``duration_s`` stops it (draining) after that long. ``handle_signals`` makes SIGINT,
    SIGTERM and SIGHUP (what a closing ssh session sends) stop it the same way, and a second
    signal cancel everything at once; SIGHUP inherited as ignored (``nohup``) stays ignored,
    and each handler found before is put back after. Without it, Ctrl-C (SIGINT) still stops
    the run that way when nobody else handles it (:func:`interrupt_unclaimed`): a
    ``KeyboardInterrupt`` would cancel every node mid-call, and a recording with it. Raises
    :class:`NodeError` if a node stopped the run.
    """
    loop = asyncio.get_running_loop()
    timer = loop.call_later(duration_s, runtime.request_stop) if duration_s is not None else None
    installed: list[tuple[signal.Signals, signal._HANDLER]] = []

    def on_interrupt(signum: signal.Signals) -> None:
        if runtime.stopping:
            log.warning("%s again: stopping now", signum.name)
            runtime.force_stop()
        else:
            log.warning("%s: stopping (draining queued items; Ctrl-C again to stop now)", signum.name)
            runtime.request_stop()

    if handle_signals:
        # `nohup edgepipe run` outlives its ssh session: an inherited ignored SIGHUP stays so
        handled = [signum for signum in STOP_SIGNALS if not kept_ignored(signum)]
    else:
        handled = [signal.SIGINT] if interrupt_unclaimed() else []
    for signum in handled:
        installed.append((signum, signal.getsignal(signum)))
        loop.add_signal_handler(signum, on_interrupt, signum)
    try:
        return await runtime.run(watchers)
    finally:
        if timer is not None:
            timer.cancel()
        for signum, before in installed:  # what was there before (the command's), not the default
            loop.remove_signal_handler(signum)
            if before is not None:
                signal.signal(signum, after_run(before))


def interrupt_unclaimed() -> bool:
    """Whether Ctrl-C would reach this run as a ``KeyboardInterrupt`` that nobody asked for: on
    the main thread (the only one with signal handlers), with Python's own SIGINT handler or the
    one ``asyncio.run()`` installs to cancel its main task. A handler of the program's own is
    left alone."""
    if threading.current_thread() is not threading.main_thread():
        return False
    handler = signal.getsignal(signal.SIGINT)
    bound = getattr(handler, "func", handler)  # asyncio.Runner's is a partial of its method
    return handler is signal.default_int_handler or isinstance(
        getattr(bound, "__self__", None), asyncio.Runner
    )
