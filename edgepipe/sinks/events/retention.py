"""Keeping an events folder within its limits: the oldest clips go first.

Only clips the recorder names (``SOURCE-YYYYmmddTHHMMSSZ[-N].mp4``) are counted or deleted;
any other file in the folder is left alone. Retention is per folder: recorders sharing one
(several processes) each keep the whole folder within their own limits, so give them the same
limits, or a folder each. A clip's age is its modification time (when it was
finalized).
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

log = logging.getLogger(__name__)

CLIP_NAME = re.compile(r"^[A-Za-z0-9_.-]+-\d{8}T\d{6}Z(-\d+)?\.mp4$")
"""The names of finalized clips."""
PART_NAME = re.compile(r"^\.[A-Za-z0-9_.-]+-\d{8}T\d{6}Z(-\d+)?(?:\.(?P<pid>\d+))?\.mp4\.part$")
"""The names of clips being written, with the writer's process id (left behind for good only
by a process that was killed)."""


def clips(folder: Path) -> list[tuple[float, str, int]]:
    """``(mtime, name, size)`` of the folder's clips, oldest first."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if not CLIP_NAME.match(entry.name) or not entry.is_file(follow_symlinks=False):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append((st.st_mtime, entry.name, st.st_size))
    found.sort()
    return found


def prune(
    folder: Path,
    max_bytes: int | None,
    max_age_s: float | None,
    now: float | None = None,
    *,
    keep: str | None = None,
) -> list[str]:
    """Delete clips older than ``max_age_s``, then the oldest until the rest take at most
    ``max_bytes``; the names deleted, oldest first. ``keep``: the clip just saved, never deleted
    (its ``event`` names it; a clip larger than ``max_bytes`` by itself is kept, with a warning,
    until the next one). Blocking (file system)."""
    now = time.time() if now is None else now
    found = clips(folder)
    total = sum(size for _, _, size in found)
    deleted = []
    for mtime, name, size in found:
        if name == keep:
            continue
        too_old = max_age_s is not None and now - mtime > max_age_s
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            continue
        try:
            (folder / name).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("event recordings: cannot delete %s: %s", folder / name, exc)
            continue
        total -= size
        deleted.append(name)
    if keep is not None and max_bytes is not None and total > max_bytes:
        log.warning("event recordings: %s alone takes %d bytes, over max_bytes (%d): kept until the next "
                    "clip", folder / keep, total, max_bytes)  # fmt: skip
    if deleted:
        log.info(
            "event recordings: deleted %d old clip(s) from %s (%s)", len(deleted), folder, ", ".join(deleted)
        )
    return deleted


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (in this PID namespace)."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def remove_parts(folder: Path) -> list[str]:
    """Delete clips a killed process left half-written (no index: not playable): those whose
    writer (the process id in the name) is gone. Another running process's clip is left alone."""
    removed = []
    with os.scandir(folder) as entries:
        for entry in entries:
            match = PART_NAME.match(entry.name)
            if match and match["pid"] and alive(int(match["pid"])):
                continue
            if match and entry.is_file(follow_symlinks=False):
                try:
                    os.unlink(entry.path)
                    removed.append(entry.name)
                except OSError as exc:
                    log.warning("event recordings: cannot delete %s: %s", entry.path, exc)
    if removed:
        log.warning("event recordings: deleted %d unfinished clip(s) in %s", len(removed), folder)
    return removed
