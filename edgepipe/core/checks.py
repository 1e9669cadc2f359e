"""Checks at the door: a value or a path refused, with what is allowed, before anything uses it.

- :class:`Range`: a number between two bounds (``Range(32, 4096).check(value)``); a pipeline
  parameter declares one with ``Annotated[int, Range(32, 4096)]`` (:mod:`edgepipe.pipefile.params`);
- :func:`check_writable_file`, :func:`check_writable_folder`: where an output goes, proven by
  writing there (a sink's file, a recorder's folder), before a camera is opened;
- :func:`not_a_file`, :func:`kind_of`: what a path is when it is not a regular file (a FIFO, a
  device), said without opening it.

Each raises ``ValueError`` with what is allowed (``a number in [32, 4096]``, ``a file path in an
existing folder (...)``); the caller names the value (``input_size must be ...``).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Range:
    """A number between ``low`` and ``high`` (each included unless ``*_open``; ``None``: no
    bound). NaN is never in range, nor an infinity unless a bound is missing on that side."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    """``low`` itself is not allowed (``Range(0, low_open=True)``: more than 0)."""
    high_open: bool = False

    def __post_init__(self) -> None:
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"Range({self.low}, {self.high}): low is above high")

    def describe(self) -> str:
        """``in [32, 4096]``, ``more than 0``, ``at most 1`` …"""
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{low}, {high}{right}"
        if self.low is not None:
            return f"more than {low}" if self.low_open else f"at least {low}"
        if self.high is not None:
            return f"less than {high}" if self.high_open else f"at most {high}"
        return "a number"

    def check(self, value: Any) -> None:
        if value is None:  # an ``X | None`` parameter left at None
            return
        wanted = f"a number {self.describe()}"
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise ValueError(wanted)
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            raise ValueError(wanted)
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            raise ValueError(wanted)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def kind_of(mode: int) -> str:
    """What a file of ``mode`` (``os.stat``'s ``st_mode``) is, in words: ``a FIFO (named pipe)``."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def not_a_file(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``"a FIFO (named pipe)"``,
    ``"a folder"`` ...), else None (a regular file, a link to one, or nothing there). Never
    opens it: opening a FIFO blocks until a writer comes, and a device may have effects."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else kind_of(mode)


def check_writable_file(path: str | os.PathLike[str]) -> None:
    """Raise ``ValueError`` (the reason, and what to give instead) unless a file can be written
    at ``path``. A FIFO or device (``/dev/null``) is checked by permission only: opening one to
    prove it could block or have effects."""
    target = Path(path)
    folder = target.parent
    if not str(path).strip():
        raise ValueError("a file path (got an empty one)")
    if target.is_dir():
        raise ValueError(f"a file path, not a folder ({target} is a folder)")
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ValueError(f"a file path in an existing folder ({folder} {what}; create it first)")
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ValueError(f"a file that can be written ({target}: {exc.strerror or exc})") from None
    if mode is not None and not stat.S_ISREG(mode):
        if not os.access(target, os.W_OK):
            raise ValueError(f"a file that can be written ({target}: permission denied)")
        return
    try:
        # O_EXCL when it is absent: a file created here is ours to remove; one that appears
        # meanwhile is not touched.
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_EXCL if mode is None else 0)
        fd = os.open(target, flags, 0o666)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOENT:  # /proc as root: the folder is there but takes no file
            reason = f"no file can be created in {folder}"
        raise ValueError(f"a file that can be written ({target}: {reason})") from None
    os.close(fd)
    if mode is None:
        with contextlib.suppress(OSError):
            os.unlink(target)


def check_writable_folder(path: str | os.PathLike[str]) -> None:
    """Raise ``ValueError`` (the reason, and what to give instead) unless files can be written in
    the folder ``path``, or it can be created (its parent exists and takes a new folder)."""
    if not str(path).strip():
        raise ValueError("a folder path (got an empty one)")
    folder = Path(path)
    try:
        mode: int | None = folder.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as exc:
        raise ValueError(f"a folder files can be written in ({folder}: {exc.strerror or exc})") from None
    if mode is not None and not stat.S_ISDIR(mode):
        if stat.S_ISREG(mode):
            raise ValueError(f"a folder path, not a file ({folder} is a file)")
        raise ValueError(f"a folder path ({folder} is not a folder)")
    if mode is None:
        parent = folder.parent
        if not parent.is_dir():
            what = "is not a folder" if parent.exists() else "does not exist; create it first"
            raise ValueError(f"a folder path in an existing folder ({parent} {what})")
        try:
            folder.mkdir()
        except FileExistsError:  # made meanwhile: not ours to remove; checked as one that exists
            pass
        except OSError as exc:
            raise ValueError(f"a folder that can be created ({folder}: {_why(exc, parent)})") from None
        else:
            with contextlib.suppress(OSError):
                folder.rmdir()
            return
    try:
        # A file, not os.access: as root, os.access says yes where no file can be made (/proc).
        fd, probe = tempfile.mkstemp(prefix=".edgepipe-probe-", dir=folder)
    except OSError as exc:
        raise ValueError(f"a folder files can be written in ({folder}: {_why(exc, folder)})") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def _why(exc: OSError, folder: Path) -> str:
    if exc.errno == errno.ENOENT:  # /proc: the folder is there but takes nothing new
        return f"nothing can be created in {folder}"
    return exc.strerror or str(exc)


__all__ = ["Range", "check_writable_file", "check_writable_folder", "kind_of", "not_a_file"]
