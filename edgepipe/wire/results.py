"""Result messages as JSON lines: what ``edgepipe run --results PATH`` writes.

Every message a node hands to a sink becomes one line::

    {"v": 1, "t": 1764683001.25, "node": "detect", "kind": "detection", "data": {...}}

``v`` is the format's version (:data:`RESULTS_VERSION`), in every line: a line read alone
(``tail -f``, ``grep``, a file cut or appended to) says it, and a reader that picks keys by name
is not disturbed by it. ``t`` is wall-clock seconds, ``node`` the node that emitted it, ``kind``
what it is, ``data`` the payload. The kind comes from the item: a :class:`Message` says it; a
dict's ``"kind"`` key; a class's ``kind`` attribute; otherwise the type's name in snake case.
Payloads that JSON cannot hold as they are (numpy values, dataclasses, enums, bytes, paths) are
converted, never dropped.

Writing never blocks the event loop: lines collect in memory and a single writer thread flushes
them in order, at least every :data:`FLUSH_INTERVAL_S`. A writer that falls behind the disk by
:data:`FLUSH_BYTES` makes its callers wait (backpressure) rather than grow.

A write that fails (a full disk, a file gone) is an error: the rest is counted and dropped and
the run ends with exit code 1. Standard output whose reader has gone (``| head -1``: EPIPE) is
not: the writer calls :attr:`ResultsWriter.on_reader_gone` (the runtime stops the run) and
points standard output at ``/dev/null``, as Python's documentation advises, so that nothing
fails again at exit.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import enum
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from edgepipe.core.cputime import RUNTIME
from edgepipe.core.errors import OutputError
from edgepipe.core.threadname import Tag
from edgepipe.wire.jsonl import LineWriter, WritesLines
from edgepipe.wire.redact import redact, redact_text

_WRITER = Tag("", RUNTIME)
"""The writer thread's work is the runtime's (the CPU ledger)."""
log = logging.getLogger(__name__)

RESULTS_VERSION = 1
"""The ``v`` of every line; raised when a field changes meaning or goes away."""
FLUSH_BYTES = 256 * 1024
FLUSH_INTERVAL_S = 0.5
_ARRAY_INLINE_MAX = 4096


@dataclass(frozen=True, slots=True)
class Message:
    """A result with an explicit kind: ``Message("event", {"what": "person entered"})``."""

    kind: str
    """What the message is: ``detection``, ``token``, ``event``, ``source_state`` ..."""
    data: Any = None
    """The payload; anything :func:`to_jsonable` can convert."""
    node: str | None = None
    """Set when the message speaks for another node than the one that emitted it."""
    t: float = field(default_factory=time.time)
    """Wall-clock seconds when the message was made."""


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def to_jsonable(value: Any) -> Any:
    """A JSON-serializable view of ``value``: the ``default`` hook of :func:`json.dumps`."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, type):
        return to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    module = type(value).__module__
    if module == "numpy":
        if getattr(value, "ndim", 0) == 0:
            return value.item()
        if value.size <= _ARRAY_INLINE_MAX:
            return value.tolist()
        return {"shape": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return repr(value)


def message_parts(item: Any) -> tuple[str | None, str, Any, float | None]:
    """``(node, kind, data, t)`` of an item; node and t are None unless the item says them."""
    if isinstance(item, Message):
        return item.node, item.kind, item.data, item.t
    if isinstance(item, dict):
        kind = item.get("kind")
        if isinstance(kind, str):
            return None, kind, {k: v for k, v in item.items() if k != "kind"}, None
        return None, "dict", item, None
    kind = getattr(type(item), "kind", None)
    if not isinstance(kind, str):
        kind = _snake(type(item).__name__)
    return None, kind, item, None


def encode(item: Any, node_id: str) -> str:
    """One JSON line (with its newline) for ``item`` emitted by ``node_id``."""
    node, kind, data, t = message_parts(item)
    if isinstance(data, dict | list | str):  # a runtime error's text may quote a camera's URL
        with contextlib.suppress(RecursionError):  # a cycle: kept as (redacted) text below
            data = redact(data)
    record = {
        "v": RESULTS_VERSION, "t": t if t is not None else time.time(), "node": node or node_id, "kind": kind,
        "data": data,
    }  # fmt: skip
    try:
        return json.dumps(record, default=to_jsonable, separators=(",", ":")) + "\n"
    except Exception as exc:  # a reference cycle, a to_dict() that raises: keep the message, say why
        try:
            text = repr(data)[:1000]
        except Exception:
            text = f"<{type(data).__name__}>"
        record["data"] = {"unencodable": redact_text(text), "error": f"{type(exc).__name__}: {exc}"}
        return json.dumps(record, separators=(",", ":")) + "\n"


class ResultsWriter(WritesLines):
    """Writes result lines to a file (``-``: standard output) off the event loop, in order
    (one :class:`~edgepipe.wire.jsonl.LineWriter`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.on_reader_gone: Callable[[], None] | None = None
        """Called once, on the event loop, when standard output's reader has gone."""
        self._lines: LineWriter[str] = LineWriter(
            "results", f"{path}: cannot write results", noun="results", log=log, tag=_WRITER,
            quiet=self._reader_gone,
        )  # fmt: skip

    @property
    def reader_gone(self) -> bool:
        """Standard output's reader closed it (EPIPE): what follows is dropped, not an error."""
        return self._lines.ended

    async def open(self) -> None:
        """Open (truncate) the file. Raises ``OSError`` naming the path if it cannot."""
        if self.path == "-":
            self._lines.use(_TextFile(sys.stdout))
            return
        try:
            await self._lines.open(lambda: _TextFile(_open_for_write(self.path)))
        except OSError as exc:
            raise OutputError(f"cannot write results here: {exc.strerror or exc}", path=self.path) from exc

    async def write(self, item: Any, node_id: str) -> None:
        if not getattr(type(item), "result", True):  # a frame on its way to a recorder or a viewer
            return
        self._lines.add(encode(item, node_id))
        if self._lines.pending_bytes >= FLUSH_BYTES:
            await self.flush()

    async def flush(self) -> None:
        """Write what is queued, and wait for it (a cancelled wait leaves the write going on)."""
        await self._lines.drain()

    def _reader_gone(self, exc: BaseException) -> bool:
        if not (isinstance(exc, BrokenPipeError) and self.path == "-"):
            return False
        if not self._lines.ended:
            log.info("standard output was closed by its reader; stopping")
            if self.on_reader_gone is not None:
                self.on_reader_gone()
        return True

    async def flush_every(self, interval_s: float, done: asyncio.Event) -> None:
        """Flush periodically until ``done`` is set (:meth:`close` writes the rest)."""
        while not done.is_set():
            try:
                async with asyncio.timeout(interval_s):
                    await done.wait()
            except TimeoutError:
                pass
            await self.flush()

    async def close(self, timeout_s: float | None = None) -> None:
        """Write what is left and close the file, within ``timeout_s`` (None: no limit). A
        writer still blocked then (a pipe nobody reads, a hung network disk) is abandoned to its
        thread: every line not written counts as lost, said in one line (:attr:`error`)."""
        # No log line when abandoned: the report carries it, and the CLI says it once with the count.
        busy = (
            f"{self.path}: cannot write results: the write was still blocked {timeout_s or 0:.1f} s "
            "after the run ended (is anything reading it?); abandoned"
        )
        await self._lines.close(timeout_s, busy)


class _TextFile:
    """The results file (or standard output, never closed here) as the writer thread uses it."""

    def __init__(self, file: IO[str]) -> None:
        self.file = file

    def write(self, lines: Sequence[str]) -> None:
        _write_lines(self.file, lines)

    def close(self) -> None:
        if self.file is not sys.stdout:
            self.file.close()


def _open_for_write(path: str) -> IO[str]:
    return open(path, "w", encoding="utf-8")  # closed by ResultsWriter.close


def _write_lines(file: IO[str], lines: Sequence[str]) -> None:
    try:
        file.writelines(lines)
        file.flush()
    except BrokenPipeError:
        if file is sys.stdout:
            _stdout_to_devnull()
        raise


def _stdout_to_devnull() -> None:
    """Point standard output at /dev/null: what its buffer still holds, and the interpreter's
    last flush at exit, go nowhere instead of failing again with EPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        with contextlib.suppress(OSError, ValueError):  # a stdout without a descriptor (tests)
            os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
