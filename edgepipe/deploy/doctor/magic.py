"""What a file is by its first bytes (its magic number), and what its extension claims.

:func:`sniff` reads the head of a file (a few KiB are enough) and names its kind: images (JPEG,
PNG, WebP, GIF, BMP, TIFF, HEIF, AVIF), containers (MP4, MOV, MKV, WebM, MPEG-TS, AVI) and raw
H.264/H.265 Annex B streams, told apart by the NAL unit types after their start codes. Nothing
here decodes; :mod:`.doctor_media` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

HEAD_BYTES = 64 * 1024
"""How much of a file sniffing reads (enough for a few MPEG-TS packets and NAL units)."""

EXTENSIONS: dict[str, str] = {
    ".jpg": "jpeg", ".jpeg": "jpeg", ".jpe": "jpeg", ".jfif": "jpeg",
    ".png": "png", ".webp": "webp", ".gif": "gif", ".bmp": "bmp", ".tif": "tiff", ".tiff": "tiff",
    ".heic": "heif", ".heif": "heif", ".avif": "avif",
    ".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".qt": "mov", ".3gp": "mp4",
    ".mkv": "mkv", ".webm": "webm", ".ts": "mpegts", ".m2ts": "mpegts", ".mts": "mpegts",
    ".avi": "avi", ".h264": "h264", ".264": "h264", ".avc": "h264",
    ".h265": "h265", ".265": "h265", ".hevc": "h265",
}  # fmt: skip
"""Extension -> the kind it claims."""

IMAGES = frozenset({"jpeg", "png", "webp", "gif", "bmp", "tiff", "heif", "avif"})
VIDEOS = frozenset({"mp4", "mov", "mkv", "webm", "mpegts", "avi", "h264", "h265"})
FAMILIES = ({"mp4", "mov"}, {"mkv", "webm"}, {"heif", "avif"})
"""Kinds one demuxer reads alike: an .mp4 holding a QuickTime file is no problem."""

NAMES = {
    "jpeg": "JPEG", "png": "PNG", "webp": "WebP", "gif": "GIF", "bmp": "BMP", "tiff": "TIFF",
    "heif": "HEIF", "avif": "AVIF", "mp4": "MP4", "mov": "QuickTime MOV", "mkv": "Matroska (MKV)",
    "webm": "WebM", "mpegts": "MPEG-TS", "avi": "AVI", "h264": "raw H.264 (Annex B)",
    "h265": "raw H.265/HEVC (Annex B)", "text": "text", "empty": "empty", "unknown": "unknown",
}  # fmt: skip
SUFFIX_OF = {"jpeg": ".jpg", "png": ".png", "webp": ".webp", "gif": ".gif", "bmp": ".bmp",
             "tiff": ".tif", "heif": ".heic", "avif": ".avif", "mp4": ".mp4", "mov": ".mov",
             "mkv": ".mkv", "webm": ".webm", "mpegts": ".ts", "avi": ".avi", "h264": ".h264",
             "h265": ".h265"}  # fmt: skip

HEIF_BRANDS = frozenset({"heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1"})
AVIF_BRANDS = frozenset({"avif", "avis"})
QT_BRANDS = frozenset({"qt  "})
TS_PACKET = 188
H264_NAMES = {1: "slice", 5: "IDR slice", 6: "SEI", 7: "SPS", 8: "PPS", 9: "AUD"}
H265_NAMES = {1: "slice", 19: "IDR slice", 20: "IDR slice", 21: "CRA slice", 32: "VPS", 33: "SPS",
              34: "PPS", 35: "AUD", 39: "SEI"}  # fmt: skip


@dataclass(frozen=True)
class Sniffed:
    """What the head of a file says it is."""

    kind: str
    """A key of :data:`NAMES`: ``jpeg``, ``mp4``, ``h264`` …, or ``unknown``."""
    evidence: str = ""
    """The bytes that say so, for people: ``89 50 4E 47 0D 0A 1A 0A``, ``ftyp brand isom``."""
    details: dict[str, object] = field(default_factory=dict)


def claimed_kind(path: Path) -> str | None:
    """The kind ``path``'s extension claims, or None for an extension this does not know."""
    return EXTENSIONS.get(path.suffix.lower())


def same_family(a: str, b: str) -> bool:
    return a == b or any(a in f and b in f for f in FAMILIES)


def hex_bytes(data: bytes) -> str:
    return " ".join(f"{b:02X}" for b in data)


def sniff(head: bytes) -> Sniffed:
    """The kind ``head`` (a file's first bytes, up to :data:`HEAD_BYTES`) starts like."""
    if head.startswith(b"\xff\xd8\xff"):
        return Sniffed("jpeg", hex_bytes(head[:3]))
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return Sniffed("png", hex_bytes(head[:8]))
    if head[:4] == b"RIFF" and head[8:12] in (b"WEBP", b"AVI "):
        kind = "webp" if head[8:12] == b"WEBP" else "avi"
        return Sniffed(kind, f"RIFF....{head[8:12].decode().strip()}")
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return Sniffed("gif", head[:6].decode())
    if head[:2] == b"BM" and len(head) >= 14 and int.from_bytes(head[10:14], "little") < 1 << 20:
        return Sniffed("bmp", "BM")
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return Sniffed("tiff", hex_bytes(head[:4]))
    if head[4:8] == b"ftyp":
        return _ftyp(head)
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        doctype = _ebml_doctype(head)
        kind = "webm" if doctype == "webm" else "mkv"
        return Sniffed(kind, f"EBML 1A 45 DF A3, DocType {doctype or '?'}", {"doctype": doctype})
    ts = _mpegts(head)
    if ts is not None:
        return ts
    return _annexb(head) or Sniffed("unknown")


def _ftyp(head: bytes) -> Sniffed:
    size = int.from_bytes(head[:4], "big")
    major = head[8:12].decode("latin-1")
    compatible = [head[i : i + 4].decode("latin-1") for i in range(16, min(size, len(head), 256) - 3, 4)]
    brands = [major, *compatible]
    if major in AVIF_BRANDS or (major not in HEIF_BRANDS and AVIF_BRANDS & set(compatible)):
        kind = "avif"
    elif major in HEIF_BRANDS:
        kind = "heif"
    elif major in QT_BRANDS:
        kind = "mov"
    else:
        kind = "mp4"
    return Sniffed(kind, f"ftyp brand {major.strip()}", {"brands": [b.strip() for b in brands]})


def read_vint(data: bytes, offset: int, *, keep_marker: bool = False) -> tuple[int, int] | None:
    """An EBML variable-length integer at ``offset``: (value, its length), None past the data."""
    if offset >= len(data) or data[offset] == 0:
        return None
    first = data[offset]
    length = 8 - first.bit_length() + 1
    if offset + length > len(data):
        return None
    value = first if keep_marker else first & ((1 << (8 - length)) - 1)
    for b in data[offset + 1 : offset + length]:
        value = (value << 8) | b
    return value, length


def _ebml_doctype(head: bytes) -> str | None:
    header = read_vint(head, 4)
    if header is None:
        return None
    size, n = header
    pos, end = 4 + n, min(len(head), 4 + n + size)
    while pos < end:
        element = read_vint(head, pos, keep_marker=True)
        if element is None:
            return None
        pos += element[1]
        length = read_vint(head, pos)
        if length is None:
            return None
        pos += length[1]
        if element[0] == 0x4282:  # DocType
            return head[pos : pos + length[0]].decode("ascii", "replace")
        pos += length[0]
    return None


def _mpegts(head: bytes) -> Sniffed | None:
    for packet, skip in ((TS_PACKET, 0), (192, 4)):  # 192: M2TS, a 4-byte timestamp first
        count = min(5, len(head) // packet)
        if count >= 2 and all(head[skip + i * packet] == 0x47 for i in range(count)):
            label = f"sync byte 47 every {packet} bytes"
            return Sniffed("mpegts", label, {"packet_bytes": packet})
    if len(head) >= 1 and head[0] == 0x47 and len(head) < 2 * TS_PACKET:
        return Sniffed("mpegts", "sync byte 47 (a single packet)", {"packet_bytes": TS_PACKET})
    return None


def _start_codes(head: bytes) -> list[int]:
    """Offsets of the NAL unit headers after each 00 00 01 start code."""
    found: list[int] = []
    pos = head.find(b"\x00\x00\x01")
    while pos >= 0 and len(found) < 64:
        if pos + 3 < len(head):
            found.append(pos + 3)
        pos = head.find(b"\x00\x00\x01", pos + 3)
    return found


def _annexb(head: bytes) -> Sniffed | None:
    """A raw H.264 or H.265 stream: it starts with a start code, and its NAL types fit one codec."""
    if not (head.startswith(b"\x00\x00\x01") or head.startswith(b"\x00\x00\x00\x01")):
        return None
    units = _start_codes(head)
    h264 = [head[i] & 0x1F for i in units if not head[i] & 0x80]
    h265 = [
        (head[i] >> 1) & 0x3F
        for i in units
        if i + 1 < len(head) and not head[i] & 0x80 and head[i + 1] & 0x07
    ]
    # A parameter set first tells the codec: H.265 opens with a VPS (32), H.264 with an SPS (7)
    # or an access unit delimiter (9); each byte read the other codec's way gives nonsense types.
    if h265 and {32, 33, 34} & set(h265[:4]):
        seen = sorted({H265_NAMES.get(t, str(t)) for t in h265})
        return Sniffed("h265", "start code 00 00 01, NAL types " + ", ".join(seen), {"nal_types": h265[:16]})
    if h264 and {7, 8, 9, 5} & set(h264[:4]):
        seen = sorted({H264_NAMES.get(t, str(t)) for t in h264})
        return Sniffed("h264", "start code 00 00 01, NAL types " + ", ".join(seen), {"nal_types": h264[:16]})
    return None
