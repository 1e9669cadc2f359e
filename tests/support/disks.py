"""Full disks for tests, made inside the test's own temporary folder, never the system's.

``small_tmpfs`` mounts a tmpfs of a few KiB/MiB on a folder under ``tmp_path`` (root only: the
test is skipped with the reason otherwise) and unmounts it at the end; ``full_device`` makes a
character device that behaves as ``/dev/full`` (every write fails with ENOSPC) in ``tmp_path``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FULL_MAJOR, FULL_MINOR = 1, 7
"""Linux's numbers for the "full" memory device."""


@contextlib.contextmanager
def small_tmpfs(tmp_path: Path, size: str = "1m", *, fill: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's syntax: ``512k``, ``3m``) mounted at ``tmp_path/disk``;
    with ``fill``, already full (one file takes all of it)."""
    if os.geteuid() != 0:
        pytest.skip("a small tmpfs needs root (mount -t tmpfs)")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        if fill:
            with open(mount_point / "filler", "wb") as filler, contextlib.suppress(OSError):
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def full_device(tmp_path: Path, name: str = "full") -> Path:
    """A character device in ``tmp_path`` that acts as ``/dev/full`` (root only; skipped otherwise)."""
    path = tmp_path / name
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(FULL_MAJOR, FULL_MINOR))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return path
