"""Frames for calibrating and checking a quantized detector: evenly spaced frames of a video, or
the pictures of a folder, as :class:`~edgepipe.media.frame.Frame` objects (the Detector's own
preprocessing makes the tensors from them).

:func:`read_frames` splits what it draws in two interleaved sets: the calibration frames and
the held-out frames the accuracy check runs on (never the same pictures, drawn from the same
stretch of video, so both see the same scenes).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import av.error
import numpy as np

from edgepipe.media.frame import Frame, from_av, from_rgb

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})
_WRAPPABLE = ("yuv420p", "yuvj420p", "nv12")
SEEK_WHEN = 8
"""Seek to each frame wanted when they are more than this many frames apart on average."""


class CalibError(ValueError):
    """The calibration input cannot give the frames asked for (the message names it)."""


@dataclass(slots=True)
class FrameSets:
    """The frames drawn from one input."""

    source: str
    calibration: list[Frame] = field(default_factory=list)
    held_out: list[Frame] = field(default_factory=list)


def read_frames(path: Path, calibration: int, held_out: int) -> FrameSets:
    """``calibration + held_out`` pictures of ``path`` (a video: evenly spaced over its length;
    a folder: its images in name order, evenly picked), dealt in turn to the two sets so that
    each covers the whole input. Blocks (decoding). Raises :class:`CalibError`."""
    if calibration < 1 or held_out < 0:
        raise CalibError(f"need at least one calibration frame, got {calibration}")
    total = calibration + held_out
    if path.is_dir():
        frames = list(_folder_frames(path, total))
    elif path.is_file():
        frames = list(_video_frames(path, total))
    else:
        raise CalibError(f"{path}: no such file or folder; give a video or a folder of images")
    if len(frames) < 2 and held_out:
        raise CalibError(f"{path}: gave {len(frames)} picture(s); need at least 2 (calibration and check)")
    sets = FrameSets(str(path))
    # Dealt so that the held-out share is spread over the input: with 8 + 4, every third frame.
    want_held = min(held_out, len(frames) // 2) if held_out else 0
    step = len(frames) / want_held if want_held else 0.0
    held_idx = {min(len(frames) - 1, int(step * i + step / 2)) for i in range(want_held)}
    for i, frame in enumerate(frames):
        (sets.held_out if i in held_idx else sets.calibration).append(frame)
    return sets


def spaced(count: int, length: int) -> list[int]:
    """``count`` indices evenly spread over ``range(length)`` (each the middle of its share)."""
    if length <= 0 or count <= 0:
        return []
    if count >= length:
        return list(range(length))
    return sorted({int((i + 0.5) * length / count) for i in range(count)})


def _folder_frames(folder: Path, count: int) -> Iterator[Frame]:
    images = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not images:
        kinds = ", ".join(sorted(IMAGE_SUFFIXES))
        raise CalibError(
            f"{folder}: no images in this folder ({kinds}); give a video or a folder of pictures"
        )
    for seq, index in enumerate(spaced(count, len(images))):
        yield _image(images[index], seq)


def _image(path: Path, seq: int) -> Frame:
    try:
        with av.open(str(path)) as container:
            picture = next(container.decode(video=0))
            rgb = picture.to_ndarray(format="rgb24")
    except (av.error.FFmpegError, StopIteration) as exc:
        raise CalibError(f"{path}: not a picture FFmpeg can read ({exc})") from exc
    if rgb.shape[0] < 2 or rgb.shape[1] < 2:
        raise CalibError(f"{path}: a {rgb.shape[1]}x{rgb.shape[0]} picture is too small")
    return from_rgb(np.ascontiguousarray(rgb), source_id=path.name, seq=seq)


def _video_frames(path: Path, count: int) -> Iterator[Frame]:
    try:
        container = av.open(str(path))
    except av.error.FFmpegError as exc:
        raise CalibError(f"{path}: not a video or picture FFmpeg can read ({exc})") from exc
    with container:
        if not container.streams.video:
            raise CalibError(f"{path}: has no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        length = stream.frames or _estimate_frames(container, stream)
        wanted = spaced(count, length)
        found = 0
        if wanted and length > SEEK_WHEN * len(wanted):
            # Far apart (a long video): seek to each rather than decode everything between.
            for picture in _seek(container, stream, wanted):
                yield _wrap(picture, path.name, found)
                found += 1
        else:
            chosen = set(wanted)
            for index, picture in enumerate(container.decode(stream)):
                if index % 15 if not chosen else index not in chosen:
                    continue
                yield _wrap(picture, path.name, found)
                found += 1
                if found >= count or (chosen and index >= wanted[-1]):
                    break
        if found == 0:
            raise CalibError(f"{path}: no frame could be decoded")


def _seek(container: Any, stream: Any, wanted: list[int]) -> Iterator[Any]:
    """The frame at or just after each of the ``wanted`` frame indices, by seeking to the
    keyframe before it and decoding forward; stops early where the container cannot seek."""
    rate = float(stream.average_rate or stream.guessed_rate)
    base = float(stream.time_base)
    start = stream.start_time or 0
    for index in wanted:
        target = start + int(index / rate / base)
        try:
            container.seek(target, stream=stream, backward=True)
        except av.error.FFmpegError as exc:
            log.debug("cannot seek in %s (%s): fewer calibration frames", container.name, exc)
            return
        for picture in container.decode(stream):
            if picture.pts is None or picture.pts >= target:
                yield picture
                break


def _estimate_frames(container: Any, stream: Any) -> int:
    """Frame count from the duration and rate where the container does not say it (0: unknown)."""
    rate = stream.average_rate or stream.guessed_rate
    if stream.duration and stream.time_base and rate:
        return int(float(stream.duration * stream.time_base) * float(rate))
    if container.duration and rate:
        return int(container.duration / av.time_base * float(rate))
    return 0


def _wrap(picture: Any, name: str, seq: int) -> Frame:
    if picture.format.name not in _WRAPPABLE:
        picture = picture.reformat(format="yuv420p")
    return from_av(picture, source_id=name, seq=seq)
