"""Driving a built :class:`~edgepipe.runtime.engine.Runtime` from start to stop: the run's timer
and its stop signals.

:func:`edgepipe.run` (:mod:`edgepipe.runner`) builds the runtime from its
:class:`~edgepipe.runner.RunConfig` and drives it here; nothing else runs a graph."""

from __future__ import annotations

import asyncio
import logging
import signal
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
    and each handler found before is put back after. Raises :class:`NodeError` if a node stopped
    the run.
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
        for signum in STOP_SIGNALS:
            if kept_ignored(signum):  # `nohup edgepipe run` outlives its ssh session
                continue
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
