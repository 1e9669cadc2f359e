"""Who uses what in the model cache, across processes: what :mod:`edgepipe.infer.model_cache.limit`
must not evict.

- :func:`hold`: this process uses a file (a pulled model, an optimized graph, one being written).
  Each held file that exists is opened and share-locked (``flock(LOCK_SH)``) while held, so that
  every process sees it in use: a camera's model is not evicted under it by another process's
  pull, which would leave it unable to start again offline.
- :func:`claim`: an evictor takes each file of an entry exclusively (``LOCK_EX | LOCK_NB``) and
  keeps it while it deletes them; a file some process holds (this one included: ``flock`` locks
  belong to each open file, not to the process) cannot be claimed, and the entry stays.
- :func:`being_written`: an optimized graph ONNX Runtime is still writing, by a process alive
  (this one included: detectors load on threads, two at once).

Where there is no ``flock`` (Windows) or it fails (some network file systems), only what this
process holds is known.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux/macOS
    fcntl = None  # type: ignore[assignment]

_lock = threading.Lock()
_held: dict[int, tuple[frozenset[Path], list[int]]] = {}
_tokens = iter(range(1 << 62))
_forever: set[Path] = set()
# ``STEM.onnx.PID.partial`` while ONNX Runtime writes a graph; ``STEM.PID.weights`` its weights.
_PARTIAL = re.compile(r"\.(\d+)\.partial$")
_WEIGHTS = re.compile(r"^(.*)\.(\d+)\.weights$")


def hold(paths: Iterable[Path], owner: object | None = None) -> int:
    """Mark ``paths`` as used by this process: never evicted while ``owner`` lives (an ONNX
    Runtime session), for the life of the process when there is no owner, or until
    :func:`release` of the token returned. A path that does not exist yet is held in this
    process only (a graph about to be written)."""
    resolved = frozenset(resolve(p) for p in paths)
    if owner is None:  # once per file: a server resolving its model on every request opens no more
        with _lock:
            resolved -= _forever
            _forever.update(resolved)
    fds = [fd for fd in map(_share_lock, sorted(resolved)) if fd is not None]
    with _lock:
        token = next(_tokens)
        _held[token] = (resolved, fds)
    if owner is not None:
        tie(token, owner)
    return token


def tie(token: int, owner: object) -> None:
    """Keep what ``token`` holds until ``owner`` is garbage."""
    weakref.finalize(owner, release, token)


def release(token: int) -> None:
    with _lock:
        paths, fds = _held.pop(token, (frozenset(), []))
        _forever.difference_update(paths)
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)  # closing drops its lock


def held_paths() -> frozenset[Path]:
    """What this process holds."""
    with _lock:
        return frozenset().union(*(paths for paths, _ in _held.values()))


def _share_lock(path: Path) -> int | None:
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # not there yet, or not a file we may open: held in this process only
    try:
        # Non-blocking: an evictor holding it exclusively is deleting it this moment.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def claim(files: Iterable[Path]) -> Iterator[bool]:
    """Yields False when a process holds one of ``files`` (a folder: any file in it); else
    True, with every file locked exclusively until the block ends (delete them in it)."""
    fds: list[int] = []
    try:
        for file in _every_file(files):
            fd = _exclusive(file)
            if fd is False:
                yield False
                return
            if fd is not None:
                fds.append(fd)
        yield True
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def in_use_elsewhere(files: Iterable[Path]) -> bool:
    """Whether a process (this one included) holds one of ``files`` now."""
    with claim(files) as free:
        return not free


def _every_file(files: Iterable[Path]) -> Iterator[Path]:
    for file in files:
        if file.is_dir():
            yield from (f for f in sorted(file.rglob("*")) if f.is_file())
        else:
            yield file


def _exclusive(file: Path) -> int | bool | None:
    """An fd holding ``file`` exclusively; False when a process holds it; None when unknown."""
    if fcntl is None:
        return None
    try:
        fd = os.open(file, os.O_RDONLY)
    except OSError:
        return None  # gone meanwhile, or not ours to open: removing it will tell
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    except OSError:  # no flock here (some network file systems): only _held is known
        os.close(fd)
        return None
    return fd


def being_written(group: Iterable[Path]) -> bool:
    """Whether a live process (this one included) is writing the optimized graph whose files
    are ``group``: a ``.PID.partial`` of it, or weights without their ``.onnx`` yet."""
    files = list(group)
    names = {f.name for f in files}
    for file in files:
        if (match := _PARTIAL.search(file.name)) and alive(int(match[1])):
            return True
        weights = _WEIGHTS.match(file.name)
        if weights and f"{weights[1]}.onnx" not in names and alive(int(weights[2])):
            return True
    return False


def alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # alive, another user's
    return True


def resolve(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path.absolute()
