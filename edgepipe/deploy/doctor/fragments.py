"""A fragmented MP4 read fragment by fragment: whole, or truncated at its tail.

A fragmented MP4 (what ``edgepipe run --output x.mp4`` records, and live streaming writes) is an
index without samples (``moov``) and then fragments (``moof`` + ``mdat``), each one whole on its
own. A writer that is killed, or a disk that fills, leaves the last fragment cut short: every
fragment before it plays, and what is missing is that fragment's tail. :func:`check` tells that
apart from damage: it reads the index (track, timescale, default sample duration) and the
``moof`` boxes that matter (the last whole one, the cut one: a few hundred bytes each), and says
how much time is missing, in ms, from the sample sizes and durations of the cut fragment.

Reading is bounded: the index and one ``moof`` at most :data:`MAX_BOX_BYTES` each.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from edgepipe.deploy.doctor.report import Diagnosis

MAX_BOX_BYTES = 4 * 1024 * 1024
"""The largest ``moov`` or ``moof`` read whole (a fragment's index is a few bytes per frame)."""

Box = tuple[str, int, int]
"""A top-level box: its type, where it starts, its declared size."""


@dataclass(frozen=True)
class Track:
    """What the index says of one track."""

    track_id: int
    timescale: int
    """Ticks per second."""
    default_duration: int
    """A sample's duration in ticks when its fragment does not say (``trex``)."""
    handler: str
    """``vide``, ``soun`` ..."""


@dataclass(frozen=True)
class Fragment:
    """One track's samples in one ``moof``."""

    start_ticks: int
    """The first sample's decode time (``tfdt``; 0 when absent)."""
    durations: tuple[int, ...]
    ends: tuple[int, ...]
    """Each sample's last byte + 1, in the file."""

    @property
    def end_ticks(self) -> int:
        return self.start_ticks + sum(self.durations)


def is_fragmented(boxes: list[Box]) -> bool:
    return any(name == "moof" for name, _, _ in boxes)


def check(f: BinaryIO, size: int, boxes: list[Box], diag: Diagnosis) -> None:
    """Describe a fragmented MP4 whose top-level ``boxes`` were walked (the last one may run
    past ``size``: the cut) into ``diag.details["fragments"]``; a cut-off tail is one problem
    that names it truncated and the time it lacks."""
    name, cut_pos, cut_size = boxes[-1]
    cut = cut_pos + cut_size > size
    moofs = [(pos, n) for kind, pos, n in boxes if kind == "moof"]
    cut_fragment = cut and name in ("moof", "mdat") and bool(moofs)
    whole_moofs = moofs[:-1] if cut_fragment else moofs
    facts: dict[str, object] = {"whole": len(whole_moofs), "finished": any(b[0] == "mfra" for b in boxes)}
    diag.details["fragments"] = facts
    moov = next(((pos, n) for kind, pos, n in boxes if kind == "moov"), None)
    track = _video_track(_read(f, *moov)) if moov is not None and moov[1] <= MAX_BOX_BYTES else None
    if track is None:
        return
    last = _fragment(f, whole_moofs[-1], track) if whole_moofs else None
    whole_ticks = last.end_ticks if last is not None else 0
    facts["whole_s"] = round(whole_ticks / track.timescale, 3)
    if not cut_fragment:
        if cut:  # the index at the end (mfra), or a box after the last fragment: no frame is missing
            facts["cut_after_last_fragment"] = name
        return
    fragment = _fragment(f, moofs[-1], track) if name == "mdat" else None
    if fragment is not None:
        whole = sum(1 for end in fragment.ends if end <= size)
        missing_ticks = sum(fragment.durations[whole:])
        kept_ticks = fragment.start_ticks + sum(fragment.durations[:whole])
        # What followed the cut fragment is not in the file, so its length is not known.
        missing = f"at least {_ms(missing_ticks, track)} ms are missing (the cut fragment's last frames)"
        where = f"{whole} of the {len(fragment.ends)} frames of the cut fragment"
    else:  # the fragment's own index is cut: none of its frames are there, how many is not known
        missing_ticks = (last.end_ticks - last.start_ticks) if last is not None else 0
        kept_ticks = whole_ticks
        missing = "the index (moof) of its last fragment is cut, so that fragment is missing" + (
            f": about {_ms(missing_ticks, track)} ms, as long as the one before" if last is not None else ""
        )
        where = "none of the cut fragment"
    facts.update(missing_ms=_ms(missing_ticks, track), playable_s=round(kept_ticks / track.timescale, 3))
    if not kept_ticks and not (fragment is not None and whole):
        diag.add(
            f"truncated: a fragmented MP4 cut short at byte {size} of {cut_pos + cut_size}: {missing}; "
            "no frame is whole: nothing plays",
            "no frame before the cut is whole, so there is nothing to keep: copy it again if the "
            "source is whole; a recording cut inside its first fragment (its writer killed, or its "
            "disk full, in its first seconds) has no frame to recover",
        )
        return
    seconds = f"{kept_ticks / track.timescale:.3f} s"
    plays = f"the first {seconds} are whole and play ({len(whole_moofs)} whole fragment(s), and {where})"
    diag.add(
        f"truncated: a fragmented MP4 cut short at byte {size} of {cut_pos + cut_size}: {missing}; {plays}",
        "nothing before the cut is damaged: the writer stopped mid-fragment (killed, or its disk "
        "filled) or a copy stopped early; copy it again if the source is whole, or keep it as it "
        f"is (players play its first {seconds}; ffmpeg -i {diag.path} -c copy {_fixed(diag.path)} "
        "drops the cut tail)",
    )


def _ms(ticks: int, track: Track) -> int:
    return round(ticks * 1000 / track.timescale)


def _fixed(path: str) -> str:
    stem, dot, suffix = path.rpartition(".")
    return f"{stem}.fixed.{suffix}" if dot else path + ".fixed"


def _read(f: BinaryIO, pos: int, n: int) -> bytes:
    f.seek(pos)
    return f.read(min(n, MAX_BOX_BYTES))


def _children(data: bytes, start: int = 8, end: int | None = None) -> Iterator[tuple[str, int, int]]:
    """The boxes inside ``data[start:end]``: type, where its payload starts, where it ends."""
    end = len(data) if end is None else min(end, len(data))
    pos = start
    while pos + 8 <= end:
        n = int.from_bytes(data[pos : pos + 4], "big")
        name = data[pos + 4 : pos + 8].decode("latin-1")
        head = 8
        if n == 1 and pos + 16 <= end:
            n, head = int.from_bytes(data[pos + 8 : pos + 16], "big"), 16
        elif n == 0:
            n = end - pos
        if n < head or pos + n > end:
            return
        yield name, pos + head, pos + n
        pos += n


def _find(data: bytes, start: int, end: int, name: str) -> tuple[int, int] | None:
    return next(((p, e) for n, p, e in _children(data, start, end) if n == name), None)


def _video_track(moov: bytes) -> Track | None:
    """The first video track (else the first track) of the index, with its ``trex`` defaults."""
    defaults: dict[int, int] = {}
    mvex = _find(moov, 8, len(moov), "mvex")
    if mvex is not None:
        for name, p, e in _children(moov, *mvex):
            if name == "trex" and e - p >= 16:
                track_id, _, duration = struct.unpack_from(">III", moov, p + 4)
                defaults[track_id] = duration
    tracks: list[Track] = []
    for name, p, e in _children(moov):
        if name != "trak":
            continue
        tkhd, mdia = _find(moov, p, e, "tkhd"), _find(moov, p, e, "mdia")
        if tkhd is None or mdia is None:
            continue
        mdhd, hdlr = _find(moov, *mdia, "mdhd"), _find(moov, *mdia, "hdlr")
        if mdhd is None:
            continue
        long = moov[tkhd[0]] == 1  # version 1: 64-bit times before the id and the timescale
        track_id = int.from_bytes(moov[tkhd[0] + (20 if long else 12) :][:4], "big")
        at = mdhd[0] + (20 if moov[mdhd[0]] == 1 else 12)
        timescale = int.from_bytes(moov[at : at + 4], "big")
        handler = moov[hdlr[0] + 8 : hdlr[0] + 12].decode("latin-1") if hdlr is not None else ""
        if timescale:
            tracks.append(Track(track_id, timescale, defaults.get(track_id, 0), handler))
    return next((t for t in tracks if t.handler == "vide"), tracks[0] if tracks else None)


def _fragment(f: BinaryIO, moof: tuple[int, int], track: Track) -> Fragment | None:
    """``track``'s samples in the ``moof`` at ``moof`` (None: not in it, or not readable)."""
    pos, n = moof
    data = _read(f, pos, n)
    if len(data) < n:
        return None
    for name, p, e in _children(data):
        if name == "traf":
            found = _traf(data, p, e, pos, track)
            if found is not None:
                return found
    return None


def _traf(data: bytes, start: int, end: int, moof_pos: int, track: Track) -> Fragment | None:
    tfhd = _find(data, start, end, "tfhd")
    if tfhd is None or tfhd[1] - tfhd[0] < 8:
        return None
    flags = int.from_bytes(data[tfhd[0] + 1 : tfhd[0] + 4], "big")
    if int.from_bytes(data[tfhd[0] + 4 : tfhd[0] + 8], "big") != track.track_id:
        return None
    at = tfhd[0] + 8
    base = moof_pos
    if flags & 0x1:  # base-data-offset present
        base = int.from_bytes(data[at : at + 8], "big")
        at += 8
    at += 4 if flags & 0x2 else 0  # sample-description-index
    default_duration = track.default_duration
    if flags & 0x8:
        default_duration = int.from_bytes(data[at : at + 4], "big")
        at += 4
    default_size = int.from_bytes(data[at : at + 4], "big") if flags & 0x10 else 0
    tfdt = _find(data, start, end, "tfdt")
    start_ticks = 0
    if tfdt is not None:
        wide = data[tfdt[0]] == 1
        start_ticks = int.from_bytes(data[tfdt[0] + 4 : tfdt[0] + (12 if wide else 8)], "big")
    durations: list[int] = []
    ends: list[int] = []
    offset = base
    for name, p, e in _children(data, start, end):
        if name != "trun":
            continue
        run_flags = int.from_bytes(data[p + 1 : p + 4], "big")
        count = int.from_bytes(data[p + 4 : p + 8], "big")
        q = p + 8
        if run_flags & 0x1:
            offset = base + int.from_bytes(data[q : q + 4], "big", signed=True)
            q += 4
        q += 4 if run_flags & 0x4 else 0  # first-sample-flags
        fields = [bit for bit in (0x100, 0x200, 0x400, 0x800) if run_flags & bit]
        for _ in range(count):
            if q + 4 * len(fields) > e:
                return None  # a trun that lies about its count: damage, not a cut
            values = dict(zip(fields, struct.unpack_from(f">{len(fields)}I", data, q), strict=True))
            q += 4 * len(fields)
            durations.append(values.get(0x100, default_duration))
            offset += values.get(0x200, default_size)
            ends.append(offset)
    return Fragment(start_ticks, tuple(durations), tuple(ends))
