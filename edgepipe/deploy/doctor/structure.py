"""Is the file whole? The structure of each format read far enough to tell a file cut short:
JPEG's end marker, PNG's chunks up to IEND, GIF's trailer, MP4's top-level boxes (``moov``, a
box running past the end; a fragmented MP4's cut tail is "truncated", by
:mod:`.doctor_fragments`), Matroska's Segment size, MPEG-TS packets.

Reading is bounded: a few bytes per PNG chunk or MP4 box header (the file is walked with seeks,
never read whole), at most :data:`MAX_ELEMENTS` of them.
"""

from __future__ import annotations

from typing import BinaryIO

from edgepipe.deploy.doctor import fragments
from edgepipe.deploy.doctor.magic import NAMES, TS_PACKET, read_vint
from edgepipe.deploy.doctor.report import Diagnosis
from edgepipe.deploy.quoting import shell_arg

MAX_ELEMENTS = 100_000
MAX_MP4_BOXES = 1_000_000
"""Top-level MP4 boxes walked at most: a fragmented recording has two a second (5.8 days)."""
MIN_BYTES = {"jpeg": 125, "png": 67, "gif": 35, "bmp": 30, "webp": 26, "tiff": 40}
"""The smallest valid file of each image kind (a 1x1 picture), about."""
COPY_AGAIN = "copy or download it again from its source (the copy, upload or recording stopped early)"
SALVAGE = "; or keep what decodes before the cut: "
"""Offered with :data:`COPY_AGAIN` for a cut file whose index is whole, unless no frame decodes."""


def check(f: BinaryIO, size: int, diag: Diagnosis) -> None:
    """Add the problems of a file cut short, by its detected kind."""
    kind = diag.kind
    name = NAMES.get(kind, kind)
    if size < MIN_BYTES.get(kind, 32):
        diag.add(f"only {size} bytes: too short to be a whole {name} file", COPY_AGAIN)
        return
    if kind == "jpeg":
        _jpeg(f, size, diag)
    elif kind == "png":
        _png(f, size, diag)
    elif kind == "gif":
        _gif(f, size, diag)
    elif kind in ("mp4", "mov"):
        _isobmff(f, size, diag)
    elif kind in ("mkv", "webm"):
        _matroska(f, size, diag)
    elif kind == "mpegts":
        _mpegts(f, size, diag)


def _tail(f: BinaryIO, size: int, n: int) -> bytes:
    f.seek(max(0, size - n))
    return f.read(n)


def _jpeg(f: BinaryIO, size: int, diag: Diagnosis) -> None:
    tail = _tail(f, size, 4096).rstrip(b"\x00")  # some writers pad after the marker
    if tail.endswith(b"\xff\xd9"):
        return
    where = tail.rfind(b"\xff\xd9")
    if where >= 0 and size - len(tail) + where > size - 4096:
        diag.details["bytes_after_end_marker"] = len(tail) - where - 2
        return  # data after the image (a camera's appended video, a trailer): readers ignore it
    diag.add(
        f"JPEG without its end marker (FF D9): cut short after {size} bytes; the bottom of the "
        "picture is missing (decoders fill it grey, or refuse it)",
        COPY_AGAIN,
    )


def _png(f: BinaryIO, size: int, diag: Diagnosis) -> None:
    pos = 8
    for _ in range(MAX_ELEMENTS):
        f.seek(pos)
        header = f.read(8)
        if len(header) < 8:
            break
        length = int.from_bytes(header[:4], "big")
        chunk = header[4:8].decode("latin-1")
        end = pos + 12 + length
        if end > size:
            diag.add(
                f"PNG cut short: chunk {chunk!r} at byte {pos} needs {end - pos} bytes, the file "
                f"ends {size - pos} bytes into it; no IEND chunk",
                COPY_AGAIN,
            )
            return
        if chunk == "IEND":
            return
        pos = end
    diag.add(f"PNG without its IEND chunk: the chunks stop at byte {pos} of {size}", COPY_AGAIN)


def _gif(f: BinaryIO, size: int, diag: Diagnosis) -> None:
    if not _tail(f, size, 16).rstrip(b"\x00").endswith(b"\x3b"):
        diag.add(f"GIF without its trailer byte (3B): cut short after {size} bytes", COPY_AGAIN)


def _isobmff(f: BinaryIO, size: int, diag: Diagnosis) -> None:
    pos = 0
    boxes: list[str] = []
    walked: list[fragments.Box] = []
    for _ in range(MAX_MP4_BOXES):
        if pos + 8 > size:
            break
        f.seek(pos)
        header = f.read(16)
        box_size = int.from_bytes(header[:4], "big")
        box = header[4:8].decode("latin-1")
        if box_size == 1 and len(header) == 16:
            box_size = int.from_bytes(header[8:16], "big")
        elif box_size == 0:  # "to the end of the file"
            box_size = size - pos
        boxes.append(box)
        if box_size < 8:
            diag.add(f"MP4 box {box!r} at byte {pos} has an impossible size ({box_size}): the "
                     "file is damaged there", COPY_AGAIN)  # fmt: skip
            break
        walked.append((box, pos, box_size))
        if pos + box_size > size:
            if not (fragments.is_fragmented(walked) and "moov" in boxes):
                _cut_box(diag, box, pos, box_size, size, "moov" in boxes[:-1])
            break
        pos += box_size
    if walked and fragments.is_fragmented(walked) and "moov" in boxes:
        fragments.check(f, size, walked, diag)  # a cut tail is "truncated", the rest is whole
    diag.details["top_level_boxes"] = boxes[:32]
    if "moov" not in boxes and not any(p.what.startswith("MP4 cut short") for p in diag.problems):
        diag.add(
            "MP4 without a 'moov' box (the index of every frame): " + _no_moov_why(boxes),
            _NO_MOOV_FIX,
        )


_NO_MOOV_FIX = (
    "copy it again if a copy stopped; a recording whose writer was killed has lost its index "
    "(rebuild it with a tool such as untrunc and a whole file from the same camera); record "
    "fragmented MP4 (movflags=frag_keyframe+empty_moov) so that a cut file still plays"
)


def _no_moov_why(boxes: list[str]) -> str:
    if "mdat" in boxes:
        return "the media data is there but the index, written last, is not"
    return f"top-level boxes {', '.join(boxes) or 'none'}"


def _cut_box(diag: Diagnosis, box: str, pos: int, box_size: int, size: int, has_moov: bool) -> None:
    missing = pos + box_size - size
    what = (
        f"MP4 cut short: box {box!r} at byte {pos} declares {box_size} bytes, the file ends after "
        f"{size - pos} of them ({missing} bytes missing)"
    )
    if has_moov:
        diag.add(
            what + "; its index (moov) is whole, the frames it points to past the cut are not",
            COPY_AGAIN + SALVAGE + _copy(diag.path),
        )
    elif box == "moov":
        diag.add(what + "; that box is the index of every frame: nothing in it can be played", COPY_AGAIN)
    else:
        diag.add(
            what + "; and no 'moov' box (the index of every frame, written last) before it: "
            "nothing in it can be played",
            _NO_MOOV_FIX,
        )


def _copy(path: str) -> str:
    """The ffmpeg command that copies what is readable into ``NAME.fixed.EXT``, names quoted."""
    stem, dot, suffix = path.rpartition(".")
    fixed = f"{stem}.fixed.{suffix}" if dot else path + ".fixed"
    return f"ffmpeg -i {shell_arg(path)} -c copy {shell_arg(fixed)}"


def _matroska(f: BinaryIO, size: int, diag: Diagnosis) -> None:
    f.seek(0)
    head = f.read(64)
    header = read_vint(head, 4)
    if header is None:
        diag.add("Matroska file cut short inside its EBML header", COPY_AGAIN)
        return
    pos = 4 + header[1] + header[0]
    segment = head[pos : pos + 4]
    length = read_vint(head, pos + 4)
    if segment != b"\x18\x53\x80\x67" or length is None:
        diag.add(f"Matroska file without a Segment after its header (byte {pos})", COPY_AGAIN)
        return
    value, n = length
    if value == (1 << (7 * n)) - 1:  # unknown size: written live, the end is wherever it stops
        diag.details["segment_size"] = "unknown (a live recording)"
        return
    end = pos + 4 + n + value
    diag.details["segment_end_byte"] = end
    if end > size:
        diag.add(
            f"Matroska cut short: its Segment declares it ends at byte {end}, the file has {size} "
            f"({end - size} bytes missing)",
            COPY_AGAIN + f"; or keep what is there: {_copy(diag.path)}",
        )


def _mpegts(f: BinaryIO, size: int, diag: Diagnosis) -> None:
    packet = int(diag.details.get("packet_bytes", TS_PACKET))
    if size % packet:
        diag.details["last_packet_bytes"] = size % packet  # decoders drop it: not a problem
    skip = packet - TS_PACKET
    f.seek(0)
    head = f.read(packet * 64)
    bad = [i for i in range(len(head) // packet) if head[i * packet + skip] != 0x47]
    if bad:
        diag.add(
            f"MPEG-TS packet {bad[0]} (byte {bad[0] * packet}) lacks its sync byte 47: the stream "
            "is damaged or has bytes inserted",
            "record it again; FFmpeg resynchronises but loses the frames around it",
        )
