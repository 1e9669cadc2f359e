"""Results as JSON lines in a file rotated by size: :class:`JsonLines`.

::

    p.sink("log", JsonLines("/var/log/cam/results.jsonl", max_bytes=10_000_000, backups=5),
           inputs=[faces, events])

The lines are those of ``edgepipe run --results`` (:func:`edgepipe.wire.results.encode`), with
``node`` the input the message came from (its lane: the node's id unless the lanes are named).
When the next line would take the file past ``max_bytes`` it is rotated as ``logging``'s
``RotatingFileHandler`` does: ``path`` becomes ``path.1``, ``path.1`` becomes ``path.2`` … up to
``path.N`` (``backups``), the oldest deleted, and a new ``path`` begun; a line is never split
between two files (one longer than ``max_bytes`` gets a file of its own). ``backups=0`` starts
``path`` again empty. An existing ``path`` is appended to: a restarted camera keeps its history.
A path that is not a regular file (a FIFO, ``/dev/stdout``) is written without rotation.

Writing never blocks the event loop: lines go to one writer thread as they come, batched while
it is busy, at most :data:`MAX_PENDING_BYTES` waiting (past that the sink waits for the disk,
as ``--results`` does, rather than grow). A write that fails (a full disk) is handled as for
``--results``: said once, the rest counted and dropped, and the run ends with exit code 1 (the
sink's :attr:`JsonLines.failed_output`).

Gauges (``--stats``, ``/metrics``): ``written``, ``lost`` (lines), ``rotated`` (times).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from edgepipe.core.executor import DaemonThreadPool
from edgepipe.pipefile.params import check_writable_file
from edgepipe.sinks.streams.framing import is_result, node_gauges
from edgepipe.wire.results import encode

log = logging.getLogger(__name__)

MAX_PENDING_BYTES = 1024 * 1024
"""Lines waiting for the writer thread, at most, before the sink waits for it."""
STOP_WAIT_S = 5.0
"""At stop, how long the lines still waiting may take to be written."""


class JsonLines:
    """A sink writing each result as a JSON line to ``path``, rotated by size (see the module
    docstring)."""

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int = 10 * 1024 * 1024, backups: int = 5
    ) -> None:
        """Raises ``ValueError`` for a path where no file can be written (its folder missing, a
        folder), a ``max_bytes`` below 1, a ``backups`` below 0."""
        try:
            check_writable_file(path)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"JsonLines: expected {exc}, got {os.fspath(path)!r}") from None
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"JsonLines: max_bytes must be a positive integer, got {max_bytes!r}")
        if isinstance(backups, bool) or not isinstance(backups, int) or backups < 0:
            raise ValueError(f"JsonLines: backups must be an integer of at least 0, got {backups!r}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self.written = 0
        """Lines written (handed to the file: on disk once it is closed)."""
        self.lost = 0
        """Lines that could not be written."""
        self.rotated = 0
        """Times the file was rotated."""
        self.error: str | None = None
        """The first write error, if any."""
        self.failed_output: str | None = None
        """Set at stop when lines were lost to a write error: the run's report names the sink
        and ``edgepipe run`` exits 1, as for ``--results``."""
        self._file: _RotatingFile | None = None
        self._pool: DaemonThreadPool | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._in_flight: asyncio.Future[None] | None = None
        self._gauges: dict[str, Any] = {}
        self._rotated_before = 0

    async def start(self) -> None:
        self._gauges = node_gauges()
        self.error = self.failed_output = None
        self._pool = DaemonThreadPool(1, "jsonl")
        self._rotated_before = self.rotated  # a restart opens a new file: the count goes on
        loop = asyncio.get_running_loop()
        try:
            self._file = await loop.run_in_executor(
                self._pool, _RotatingFile.open, self.path, self.max_bytes, self.backups
            )
        except OSError as exc:
            self._pool.shutdown(wait=False)
            raise OSError(f"JsonLines: cannot write to {self.path}: {exc.strerror or exc}") from None
        self._update_gauges()

    async def process(self, item: Any, lane: str) -> None:
        if not is_result(item):
            return
        line = encode(item, lane).encode("utf-8")
        if self.error is not None:
            self.lost += 1
            self._update_gauges()
            return
        self._pending.append(line)
        self._pending_bytes += len(line)
        if self._in_flight is None:
            self._write_pending()
        elif self._pending_bytes >= MAX_PENDING_BYTES:
            while self._in_flight is not None and self._pending_bytes >= MAX_PENDING_BYTES:
                await asyncio.wait([self._in_flight])  # the disk is behind: wait, never grow

    def _write_pending(self) -> None:
        """Hand every waiting line to the writer thread (one write at a time, in order)."""
        if not self._pending or self._file is None or self._pool is None:
            return
        lines, self._pending, self._pending_bytes = self._pending, [], 0
        if self.error is not None:
            self.lost += len(lines)
            return
        loop = asyncio.get_running_loop()
        write = loop.run_in_executor(self._pool, self._file.write, lines)
        self._in_flight = write
        write.add_done_callback(self._written(len(lines)))

    def _written(self, n: int) -> Callable[[asyncio.Future[None]], None]:
        def done(write: asyncio.Future[None]) -> None:
            self._in_flight = None
            if self._file is not None:
                self.rotated = self._rotated_before + self._file.rotated
            exc = write.exception() if not write.cancelled() else None
            if exc is None and not write.cancelled():
                self.written += n
            else:
                self.lost += n
                if self.error is None:
                    reason = getattr(exc, "strerror", None) or exc or "cancelled"
                    self.error = f"{self.path}: cannot write: {reason}"
                    log.error("%s; lines from now on are counted and dropped", self.error)
            self._update_gauges()
            self._write_pending()  # what came meanwhile

        return done

    async def stop(self) -> None:
        """Write what is waiting (within :data:`STOP_WAIT_S`) and close the file."""
        try:
            async with asyncio.timeout(STOP_WAIT_S):
                while self._in_flight is not None or (self._pending and self._file is not None):
                    if self._in_flight is None:
                        self._write_pending()
                    if self._in_flight is not None:
                        await asyncio.wait([self._in_flight])  # its failure is counted in _written
        except TimeoutError:
            left = len(self._pending)
            self._pending, self._pending_bytes = [], 0
            self.lost += left
            busy = f"{self.path}: the disk was still busy {STOP_WAIT_S:g} s after the run ended"
            self.error = self.error or busy
        file, pool = self._file, self._pool
        self._file = self._pool = None
        if file is not None and pool is not None:
            try:
                await asyncio.get_running_loop().run_in_executor(pool, file.close)
            except OSError as exc:  # close flushes: the last write can fail here
                self.error = self.error or f"{self.path}: cannot write: {exc.strerror or exc}"
        if pool is not None:
            pool.shutdown(wait=False)
        if self.error is not None:
            self.failed_output = f"{self.error}; {self.lost} line(s) lost"
        self._update_gauges()

    def _update_gauges(self) -> None:
        g = self._gauges
        g["written"] = self.written
        g["lost"] = self.lost
        g["rotated"] = self.rotated


class _RotatingFile:
    """The open file and its size, used by the writer thread only."""

    def __init__(self, path: Path, file: IO[bytes], max_bytes: int, backups: int, rotating: bool) -> None:
        self.path = path
        self.file = file
        self.max_bytes = max_bytes
        self.backups = backups
        self.rotating = rotating
        self.size = os.fstat(file.fileno()).st_size if rotating else 0
        self.rotated = 0

    @classmethod
    def open(cls, path: Path, max_bytes: int, backups: int) -> _RotatingFile:
        file = open(path, "ab")  # noqa: SIM115 (closed by close())
        rotating = stat.S_ISREG(os.fstat(file.fileno()).st_mode)
        return cls(path, file, max_bytes, backups, rotating)

    def write(self, lines: list[bytes]) -> None:
        chunk: list[bytes] = []
        for line in lines:
            if self.rotating and self.size and self.size + len(line) > self.max_bytes:
                self._write(chunk)
                chunk = []
                self._rotate()
            chunk.append(line)
            self.size += len(line)
        self._write(chunk)

    def _write(self, chunk: list[bytes]) -> None:
        if chunk:
            self.file.write(b"".join(chunk))
            self.file.flush()

    def _rotate(self) -> None:
        self.file.close()
        if self.backups:
            for n in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{n}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{n + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
            self.file = open(self.path, "ab")  # noqa: SIM115 (closed by close())
        else:
            self.file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self.size = 0
        self.rotated += 1

    def close(self) -> None:
        self.file.close()
