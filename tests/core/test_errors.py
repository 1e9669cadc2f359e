"""An OSError's reason, as it reads inside a sentence."""

from __future__ import annotations

import errno

import av.error

from edgepipe.core.errors import os_reason


def test_an_oserrors_reason_reads_in_a_sentence_without_errno_or_file_name() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/mnt/t/.clip.part")
    assert os_reason(full) == "no space left on device"
    gone = FileNotFoundError(errno.ENOENT, "No such file or directory")
    assert os_reason(gone) == "no such file or directory"
    # FFmpeg's errors are no OSErrors but carry the same fields
    ffmpeg = av.error.FFmpegError(errno.ENOSPC, "No space left on device")
    assert os_reason(ffmpeg) == "no space left on device"
    assert os_reason(OSError("EOF on the pipe")) == "EOF on the pipe"  # a capitalised word stays
    assert os_reason(ValueError("Clip is closed")) == "clip is closed"
    assert os_reason(OSError()) == "OSError"
