"""JSON lines written off the event loop: :class:`LineWriter`, the one writer thread design
behind ``--results`` (:class:`edgepipe.wire.results.ResultsWriter`) and the
:class:`~edgepipe.sinks.streams.JsonLines` sink.

Lines collect on the event loop and go to one thread of the writer's own, one batch at a time,
in order; the loop never waits for the disk unless its owner asks (:meth:`LineWriter.drain`,
backpressure). Every line is counted once, as written or as lost:

- a write that fails is an error (a full disk, a file gone): said once in the log, kept in
  :attr:`LineWriter.error`, and every line after it counted and dropped, unless the owner's
  ``quiet`` says the failure is an ending, not an error (standard output's reader gone);
- a writer still blocked when :meth:`LineWriter.close`'s deadline passes (a pipe nobody reads, a
  hung network disk) is abandoned to its thread: every line not written counts as lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence, Sized
from typing import Any, Generic, Protocol, TypeVar

from edgepipe.core.executor import DaemonThreadPool
from edgepipe.core.threadname import Tag

Line = TypeVar("Line", bound=Sized)
"""One line, with its newline: ``str`` or ``bytes``."""
Line_contra = TypeVar("Line_contra", bound=Sized, contravariant=True)


class LineFile(Protocol[Line_contra]):
    """Where the lines go; called in the writer thread only."""

    def write(self, lines: Sequence[Line_contra]) -> None:
        """Write and flush ``lines``; raise ``OSError`` when it cannot."""

    def close(self) -> None:
        """Flush and close (nothing for a stream the writer does not own)."""


class LineWriter(Generic[Line]):
    """Lines written in order by one thread (see the module docstring). Used from the event
    loop only. ``name`` names the thread; ``what`` starts the error line (``PATH: cannot write
    results``); ``noun`` says what is dropped after an error; ``eager`` hands each line to the
    thread as soon as it is free (else only at :meth:`hand_over`); ``quiet(exc)`` True: that
    failure ends the writing without being an error; ``on_batch`` runs after each batch."""

    def __init__(
        self,
        name: str,
        what: str,
        *,
        noun: str = "lines",
        eager: bool = False,
        log: logging.Logger | None = None,
        tag: Tag | None = None,
        quiet: Callable[[BaseException], bool] | None = None,
        on_batch: Callable[[], None] | None = None,
    ) -> None:
        self.what = what
        self.written = 0
        """Lines written (handed to the file: on disk once it is closed)."""
        self.lost = 0
        """Lines that could not be written."""
        self.error: str | None = None
        """The first write error, if any."""
        self.ended = False
        """A ``quiet`` failure ended the writing: what follows is dropped, not an error."""
        self._name, self._noun, self._eager, self._tag = name, noun, eager, tag
        self._log = log or logging.getLogger(__name__)
        self._quiet, self._on_batch = quiet, on_batch
        self._pending: list[Line] = []
        self._pending_bytes = 0
        self._in_flight: asyncio.Future[None] | None = None
        self._in_flight_lines = 0
        self._abandoned = False
        self._file: LineFile[Line] | None = None
        self._pool: DaemonThreadPool | None = None

    @property
    def pending_bytes(self) -> int:
        """The size of the lines not handed to the thread yet."""
        return self._pending_bytes

    async def open(self, opener: Callable[[], LineFile[Line]]) -> None:
        """Open the file with ``opener``, in the writer's thread (a new one: a writer closed
        may be opened again, its counts going on). Raises what ``opener`` raises."""
        pool = self._start()
        try:
            self._file = await asyncio.get_running_loop().run_in_executor(pool, opener)
        except BaseException:
            self._pool = None
            pool.shutdown(wait=False)
            raise

    def use(self, file: LineFile[Line]) -> None:
        """Write to ``file``, opened already (standard output)."""
        self._start()
        self._file = file

    def _start(self) -> DaemonThreadPool:
        self.error, self.ended, self._abandoned = None, False, False
        self._pool = DaemonThreadPool(1, self._name, tag=self._tag)
        return self._pool

    def add(self, line: Line) -> None:
        """Queue ``line`` (counted lost at once after an error); handed to the thread now when
        ``eager`` and it is free."""
        if self.error is not None or self.ended:
            self.lost += 1
            return
        self._pending.append(line)
        self._pending_bytes += len(line)
        if self._eager:
            self.hand_over()

    def hand_over(self) -> None:
        """Give every queued line to the thread, unless a batch is in flight (it follows that)."""
        if self._in_flight is not None or not self._pending or self._file is None or self._pool is None:
            return
        lines, self._pending, self._pending_bytes = self._pending, [], 0
        if self.error is not None or self.ended:
            self.lost += len(lines)
            return
        write = asyncio.get_running_loop().run_in_executor(self._pool, self._file.write, lines)
        self._in_flight, self._in_flight_lines = write, len(lines)
        write.add_done_callback(self._done)

    def _done(self, write: asyncio.Future[None]) -> None:
        n, self._in_flight, self._in_flight_lines = self._in_flight_lines, None, 0
        if self._abandoned:  # counted as lost by close()
            return
        exc = None if write.cancelled() else write.exception()
        if exc is None and not write.cancelled():
            self.written += n
        else:
            self.lost += n
            if exc is not None and self._quiet is not None and self._quiet(exc):
                self.ended = True
            elif self.error is None:
                reason = getattr(exc, "strerror", None) or exc or "cancelled"
                self.error = f"{self.what}: {reason}"
                self._log.error("%s; %s from now on are counted and dropped", self.error, self._noun)
        if self._on_batch is not None:
            self._on_batch()
        if self._eager:
            self.hand_over()  # what came meanwhile

    async def drain(self) -> None:
        """Hand over what is queued and wait until it is written (or lost). Cancelling the wait
        leaves the write going on: its lines are still counted once."""
        self.hand_over()
        while self._in_flight is not None:
            await asyncio.wait([self._in_flight])
            self.hand_over()

    async def wait_below(self, limit_bytes: int) -> None:
        """Backpressure: wait while ``limit_bytes`` or more are queued behind a busy thread."""
        while self._in_flight is not None and self._pending_bytes >= limit_bytes:
            await asyncio.wait([self._in_flight])

    async def close(self, timeout_s: float | None, busy: str) -> None:
        """Write what is left and close the file, within ``timeout_s`` (None: no limit). A
        writer still blocked then is abandoned: what is not written counts as lost, and
        :attr:`error` (if none yet) is ``busy``."""
        file, pool = self._file, self._pool
        try:
            async with asyncio.timeout(timeout_s):
                await self.drain()
                if file is not None and pool is not None:
                    try:
                        await asyncio.get_running_loop().run_in_executor(pool, file.close)
                    except OSError as exc:  # close flushes: the last write can fail here
                        self.error = self.error or f"{self.what}: {exc.strerror or exc}"
        except TimeoutError:
            self._abandoned = True
            if file is not None and pool is not None:
                pool.submit(_close_quietly, file)  # if the blocked write ever returns
            self.lost += self._in_flight_lines + len(self._pending)
            self._pending, self._pending_bytes = [], 0
            self.error = self.error or busy
        self._file = self._pool = None
        if pool is not None:
            pool.shutdown(wait=False)


class WritesLines:
    """What a writer built on a :class:`LineWriter` (its ``_lines``) says of its lines."""

    _lines: LineWriter[Any]

    @property
    def written(self) -> int:
        """Lines written (handed to the file: on disk once it is closed)."""
        return self._lines.written

    @property
    def lost(self) -> int:
        """Lines that could not be written (a full disk, a file gone); the pipeline goes on."""
        return self._lines.lost

    @property
    def error(self) -> str | None:
        """The first write error, if any."""
        return self._lines.error


def _close_quietly(file: LineFile[Line]) -> None:
    with contextlib.suppress(OSError, ValueError):
        file.close()


__all__ = ["LineFile", "LineWriter", "WritesLines"]
