"""Keeping a long-running process's memory flat: glibc's threshold for large allocations.

glibc serves an allocation above ``M_MMAP_THRESHOLD`` with its own ``mmap`` and gives it back
to the system on ``free``. The threshold starts at 128 KiB but rises to the size of every large
block freed (up to 32 MiB), so after a few decoder reopens multi-megabyte buffers (frames,
codec and model scratch) come from the heaps of a dozen threads instead, where freeing them
leaves holes that the process keeps. Measured on the headroom benchmark (4 x 1080p decode, a
detector, a language model): resident memory swung between 517 and 583 MB over 150 s with the
default, and held at 421-444 MB with the threshold fixed at 256 KiB; face_privacy at 1080p30
(a writable copy of every frame) held 370-379 MB instead of 490-500 MB, recording as many
frames (344 and 333 vs 350 and 334 in 30 s, ungoverned: the extra mmap per large allocation
is lost in the noise). Setting it (``mallopt``) also turns the rising off.
``EDGEPIPE_MMAP_THRESHOLD`` (bytes; 0: glibc's default) overrides it. Elsewhere than glibc
this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3
DEFAULT_THRESHOLD = 256 * 1024


def fix_mmap_threshold(nbytes: int | None = None) -> bool:
    """Fix glibc's mmap threshold at ``nbytes`` (default ``EDGEPIPE_MMAP_THRESHOLD``, else 256
    KiB; 0 leaves glibc's rising threshold alone); True if it was set. Call once, early."""
    if nbytes is None:
        text = os.environ.get("EDGEPIPE_MMAP_THRESHOLD", "")
        try:
            nbytes = int(text) if text else DEFAULT_THRESHOLD
        except ValueError:
            log.warning(
                "EDGEPIPE_MMAP_THRESHOLD=%r is not a number of bytes: using %d", text, DEFAULT_THRESHOLD
            )
            nbytes = DEFAULT_THRESHOLD
    if nbytes <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl (Alpine) has no mallopt: nothing to tune
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, nbytes) == 1)
    if not done:
        log.debug("mallopt(M_MMAP_THRESHOLD, %d) refused", nbytes)
    return done
