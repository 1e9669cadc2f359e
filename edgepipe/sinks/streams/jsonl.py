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

import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from edgepipe.core.checks import check_writable_file
from edgepipe.sinks.streams.framing import is_result, node_gauges
from edgepipe.wire.jsonl import LineWriter, WritesLines
from edgepipe.wire.results import encode

log = logging.getLogger(__name__)

MAX_PENDING_BYTES = 1024 * 1024
"""Lines waiting for the writer thread, at most, before the sink waits for it."""
STOP_WAIT_S = 5.0
"""At stop, how long the lines still waiting may take to be written."""


class JsonLines(WritesLines):
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
        self.rotated = 0
        """Times the file was rotated."""
        self.failed_output: str | None = None
        """Set at stop when lines were lost to a write error: the run's report names the sink
        and ``edgepipe run`` exits 1, as for ``--results``."""
        self._lines: LineWriter[bytes] = LineWriter(
            "jsonl", f"{self.path}: cannot write", eager=True, log=log, on_batch=self._update_gauges
        )
        self._file: _RotatingFile | None = None
        self._gauges: dict[str, Any] = {}
        self._rotated_before = 0

    async def start(self) -> None:
        self._gauges = node_gauges()
        self.failed_output = None
        self._rotated_before = self.rotated  # a restart opens a new file: the count goes on

        def open_file() -> _RotatingFile:
            self._file = _RotatingFile.open(self.path, self.max_bytes, self.backups)
            return self._file

        try:
            await self._lines.open(open_file)
        except OSError as exc:
            raise OSError(f"JsonLines: cannot write to {self.path}: {exc.strerror or exc}") from None
        self._update_gauges()

    async def process(self, item: Any, lane: str) -> None:
        if not is_result(item):
            return
        self._lines.add(encode(item, lane).encode("utf-8"))
        if self._lines.pending_bytes >= MAX_PENDING_BYTES:
            await self._lines.wait_below(MAX_PENDING_BYTES)  # the disk is behind: wait, never grow
        else:
            self._update_gauges()

    async def stop(self) -> None:
        """Write what is waiting (within :data:`STOP_WAIT_S`) and close the file."""
        busy = f"{self.path}: the disk was still busy {STOP_WAIT_S:g} s after the run ended"
        await self._lines.close(STOP_WAIT_S, busy)
        self._file = None
        if self.error is not None:
            self.failed_output = f"{self.error}; {self.lost} line(s) lost"
        self._update_gauges()

    def _update_gauges(self) -> None:
        if self._file is not None:
            self.rotated = self._rotated_before + self._file.rotated
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

    def write(self, lines: Sequence[bytes]) -> None:
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
