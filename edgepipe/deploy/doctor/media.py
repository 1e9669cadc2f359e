"""Will PyAV decode it, with which decoders, and does it fit in memory?

:func:`decode_check` runs :mod:`.doctor_decode` in a child process under a deadline (a corrupt
file can make a decoder loop or crash: neither reaches this process), then turns what it saw
into problems: no frame decoded, a decoder missing from this FFmpeg build, a picture too large
for the process's memory budget (:mod:`edgepipe.planning.memory`). The hardware decoders this
FFmpeg build has for the codec come from :mod:`edgepipe.media.hw` (named, not tried: ``edgepipe
probe`` tries them on this machine).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from edgepipe.deploy.doctor.magic import IMAGES
from edgepipe.deploy.doctor.report import Diagnosis, Problem
from edgepipe.deploy.doctor.structure import SALVAGE
from edgepipe.deploy.quoting import shell_arg
from edgepipe.planning.memory import format_bytes, memory_plan

POOL_FRAMES = 3
"""A video source's frame pool outside a pipeline (two held by a consumer, one being decoded)."""


def run_decoder(path: str, frames: int, budget_bytes: int, timeout_s: float) -> dict[str, Any]:
    """What the child saw; ``{"timeout": True}`` past ``timeout_s``, ``{"crash": rc}`` when it died."""
    command = [sys.executable, "-m", "edgepipe.deploy.doctor.decode", path, str(frames), str(budget_bytes)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"timeout": True}
    try:
        result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    except (IndexError, ValueError):
        return {"crash": done.returncode, "stderr": done.stderr.strip().splitlines()[-1:]}
    return result


def decoders_here(codec: str) -> dict[str, Any]:
    """The software decoder and the hardware ways this FFmpeg build has for ``codec``."""
    import av

    from edgepipe.media import hw

    try:
        decoder = av.codec.Codec(codec, "r")
    except (av.error.FFmpegError, ValueError):
        return {"software": None, "hardware": []}
    # A hwaccel device counts only where the codec's decoder has a configuration for it.
    devices = {str(getattr(c.device_type, "name", c.device_type)) for c in decoder.hardware_configs or ()}
    usable = [c for c in hw.candidates(codec) if c.decoder or c.hwaccel in devices]
    return {"software": decoder.name, "hardware": [c.label for c in usable]}


def budget_bytes() -> int:
    """The process's memory budget (0: unknown, no limit)."""
    return memory_plan().budget_bytes or 0


def decode_check(diag: Diagnosis, *, frames: int, timeout_s: float) -> None:
    """Decode the first frames of ``diag.path`` (one for a picture) and add what went wrong."""
    image = diag.kind in IMAGES
    wanted = 1 if image else frames
    budget = budget_bytes()
    seen = run_decoder(diag.path, wanted, budget, timeout_s)
    diag.details["decode"] = seen
    if seen.get("timeout"):  # too short a deadline or a decoder that loops: nothing is known
        diag.unchecked = (f"not checked in time (raise --timeout-s): the decoder gave no answer within "
                          f"{timeout_s:g} s and was stopped")  # fmt: skip
        return
    if "crash" in seen:
        diag.add(f"the decoder crashed (exit {seen['crash']}) on this file",
                 "get another copy, or re-encode it with another tool")  # fmt: skip
        return
    codec = seen.get("codec")
    if codec:
        diag.details["decoders"] = decoders_here(codec)
    width, height = int(seen.get("width") or 0), int(seen.get("height") or 0)
    if width and height:
        _memory(diag, width, height, image, budget)
    if seen.get("skipped"):
        return
    if "open_error" in seen:
        _cannot_open(diag, seen)
        return
    got, declared = int(seen.get("frames", 0)), int(seen.get("declared_frames") or 0)
    wanted = min(wanted, declared) if declared else wanted
    if got >= wanted or (seen.get("ended") and got and not seen.get("errors")):
        return  # every frame there is decoded (a short clip whose container does not count them)
    why = seen.get("first_error") or "; ".join(seen.get("log", [])[-2:]) or "no error given"
    what = (
        f"FFmpeg opens it ({codec}, {width}x{height}) but decoded {got} of the first {wanted} frames: {why}"
    )
    _add_or_extend(diag, what, "get another copy; if every copy fails, re-encode it from its source", got)


def _cannot_open(diag: Diagnosis, seen: dict[str, Any]) -> None:
    log = "; ".join(seen.get("log", [])[-2:])
    what = f"FFmpeg cannot open it: {seen['open_error']}" + (f" ({log})" if log else "")
    fix = "check that it is a media file, then get another copy"
    if diag.kind in ("heif", "avif"):
        # FFmpeg reads HEIF/AVIF stills as a grid of tiles, or not at all, depending on its build
        stem = diag.path.rpartition(".")[0] or diag.path
        convert = f"heif-convert {shell_arg(diag.path)} {shell_arg(stem + '.jpg')}"
        fix = f"convert it to JPEG or PNG first: {convert} (libheif)"
    _add_or_extend(diag, what, fix)


def _add_or_extend(diag: Diagnosis, what: str, fix: str, decoded: int = 0) -> None:
    """A decode failure that a structural problem explains joins that problem as its evidence
    (and a cut file of which no frame decodes is not offered to keep what decodes)."""
    if diag.problems:
        first = diag.problems[0]
        first_fix = first.fix
        if not decoded and SALVAGE in first_fix:
            first_fix = first_fix.split(SALVAGE)[0] + "; no frame before the cut decodes: nothing to keep"
        diag.problems[0] = Problem(f"{first.what} (PyAV: {what})", first_fix)
    else:
        diag.add(what, fix)


def _memory(diag: Diagnosis, width: int, height: int, image: bool, budget: int) -> None:
    """A picture decoded to RGB, or a video's pool of NV12 frames, against the budget."""
    if image:
        nbytes, what = width * height * 3, f"one {width}x{height} picture decoded to RGB"
    else:
        nbytes = POOL_FRAMES * width * height * 3 // 2
        what = f"a pool of {POOL_FRAMES} {width}x{height} frames (NV12)"
    diag.details["decoded_bytes"] = nbytes
    if budget and nbytes > budget:
        diag.add(
            f"{what} needs {format_bytes(nbytes)}, more than this process's memory budget of "
            f"{format_bytes(budget)}",
            "scale it down before decoding here (ffmpeg -i IN -vf scale=1920:-2 OUT), decode it "
            "in tiles, or run where there is more memory (or raise EDGEPIPE_MEMORY_FRAC)",
        )
