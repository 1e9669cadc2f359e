"""``edgepipe doctor``'s diagnosis of one file, and the walk over the paths it is given.

For each file: its first bytes against its extension (:mod:`.doctor_magic`), whether it is
whole (:mod:`.doctor_structure`), whether PyAV decodes its first frames and with which decoders
(:mod:`.doctor_media`), and for text its likely encoding (:mod:`.doctor_text`). Reading is
bounded: :data:`~.doctor_magic.HEAD_BYTES` to sniff, :data:`~.doctor_text.SAMPLE_BYTES` of a
text file, box and chunk headers only for the structure; the decoder reads what its first
frames need.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from edgepipe.core.checks import kind_of
from edgepipe.deploy.doctor import magic, text
from edgepipe.deploy.doctor.media import decode_check
from edgepipe.deploy.doctor.report import Diagnosis
from edgepipe.deploy.doctor.structure import check as check_structure
from edgepipe.deploy.quoting import python_literal, shown

DEFAULT_FRAMES = 8
DEFAULT_TIMEOUT_S = 20.0


def walk(paths: list[str]) -> tuple[list[Path], list[str]]:
    """The files under ``paths`` (folders walked recursively, hidden names skipped, sorted),
    and the paths that do not exist."""
    files: list[Path] = []
    missing: list[str] = []
    for name in paths:
        path = Path(name)
        if os.path.isdir(path):  # os.path's answer False where pathlib raises (a name too long)
            files += _walk_dir(path)
        elif os.path.exists(path):
            files.append(path)
        else:
            missing.append(name)
    return files, missing


def _walk_dir(root: Path) -> Iterator[Path]:
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith(".") and Path(folder, name).is_file():
                yield Path(folder, name)


def diagnose(path: Path, *, frames: int = DEFAULT_FRAMES, timeout_s: float = DEFAULT_TIMEOUT_S) -> Diagnosis:
    """Everything doctor finds about one file. Blocks (reads the file, runs a decoder process)."""
    info = path.stat()
    size = info.st_size
    claimed = magic.claimed_kind(path)
    if claimed is None and path.suffix.lower() in text.TEXT_EXTENSIONS:
        claimed = "text"
    if not stat.S_ISREG(info.st_mode):  # opening a FIFO blocks; a device never ends
        return _not_a_file(Diagnosis(str(path), "unknown", claimed, size), info.st_mode)
    with path.open("rb") as f:
        head = f.read(max(magic.HEAD_BYTES, text.SAMPLE_BYTES))
        sniffed = magic.sniff(head[: magic.HEAD_BYTES])
        diag = Diagnosis(str(path), sniffed.kind, claimed, size)
        if size == 0:
            diag.kind = "empty"
            diag.add("empty file (0 bytes)", "nothing was written: the recording, download or copy "
                     "failed before its first byte; copy it again, or look at what wrote it")  # fmt: skip
            return diag
        if sniffed.kind != "unknown":
            diag.details.update(sniffed.details, evidence=sniffed.evidence)
            _media(diag, path, claimed, sniffed)
            check_structure(f, size, diag)
    if sniffed.kind == "unknown":
        _not_media(diag, path, claimed, head)
    elif diag.kind in magic.IMAGES | magic.VIDEOS:
        decode_check(diag, frames=frames, timeout_s=timeout_s)
    return diag


def _not_a_file(diag: Diagnosis, mode: int) -> Diagnosis:
    diag.kind = "special"
    diag.add(f"not a regular file but {kind_of(mode)}: reading it could block or never end, so doctor "
             "does not", "diagnose a copy: save what it sends to a regular file first")  # fmt: skip
    return diag


def _media(diag: Diagnosis, path: Path, claimed: str | None, sniffed: magic.Sniffed) -> None:
    if claimed is None or magic.same_family(claimed, sniffed.kind):
        return
    name = magic.NAMES[sniffed.kind]
    right = path.with_suffix(magic.SUFFIX_OF[sniffed.kind]).name
    diag.add(
        f"named {path.suffix} ({magic.NAMES[claimed]}) but its bytes are {name} ({sniffed.evidence})",
        f"rename it to {shown(right)}: tools that go by the name (an image library picking its decoder, a "
        "web server's MIME type, an upload filter) will misread it",
    )


def _not_media(diag: Diagnosis, path: Path, claimed: str | None, head: bytes) -> None:
    sample = head[: text.SAMPLE_BYTES]
    if text.looks_like_text(sample):
        diag.kind = "text"
        if claimed not in (None, "text"):
            start = sample[:40].decode("utf-8", "replace").split("\n")[0]
            diag.add(
                f"named {path.suffix} ({magic.NAMES[claimed]}) but it is text, starting {start!r}",
                "a download that saved an error page or a redirect instead of the file: read it to "
                "see what the server said, then download the file again",
            )
            return
        _text(diag, path, sample)
        return
    if claimed not in (None, "text"):
        diag.add(
            f"named {path.suffix} but its first bytes ({magic.hex_bytes(head[:8])}) are not "
            f"{magic.NAMES[claimed]}, nor any media format doctor knows",
            "it is damaged from its first byte, or not this kind of file: get another copy, or "
            "identify it with `file`",
        )
    elif claimed == "text":
        controls = sum(1 for b in sample if b < 32 and b not in (9, 10, 12, 13, 27))
        diag.add(
            f"named {path.suffix} (text) but it is binary: {controls} control bytes in its first "
            f"{len(sample)} (first bytes {magic.hex_bytes(head[:8])}); no text encoding reads it",
            "it is damaged, encrypted or compressed, or not this kind of file: identify it with "
            "`file`, or get another copy",
        )
    else:
        diag.details["note"] = "neither media nor text: not checked"


def _text(diag: Diagnosis, path: Path, sample: bytes) -> None:
    found = text.guess(sample)
    diag.details.update(encoding=found.encoding, encoding_name=found.label,
                        evidence_score=round(found.score, 3), checked_bytes=len(sample))  # fmt: skip
    if found.scores:
        diag.details["scores"] = {name: round(score, 3) for name, score in found.scores}
    name = str(path)
    if found.encoding in ("utf-8", "utf-8-sig"):
        return
    if found.bad_offset is None:  # UTF-16
        bom = "with a BOM" if found.bom else "without a BOM"
        diag.add(f"{found.label} text ({bom}), not UTF-8: a UTF-8 reader sees a zero byte in every "
                 "ASCII character, or fails", found.how_to_read(name))  # fmt: skip
        return
    where = (
        f"byte {found.bad_offset} (line {found.bad_line}, column {found.bad_column}) is "
        f"{magic.hex_bytes(found.bad_bytes[:2])}, which UTF-8 cannot decode"
    )
    if found.encoding == "unknown":
        best = max(found.scores, key=lambda s: s[1])
        diag.add(
            f"not UTF-8: {where}; nor GBK, Big5, Shift-JIS or Latin-1/Windows-1252 text (best: "
            f"{best[0]}, {best[1]:.0%} common characters): mixed encodings or damage",
            f'read what decodes with open({python_literal(name)}, encoding="utf-8", errors="replace") '
            "and ask what wrote the rest",
        )
        return
    if found.mixed:
        diag.add(
            f"two encodings in one file: UTF-8 (with non-ASCII text) up to line {found.bad_line}, "
            f"then {where}; from there it is likely {found.label}",
            f"convert the lines from {found.bad_line} on: decode each line as UTF-8 and, where that "
            f'fails, as {found.encoding} (line.decode("{found.encoding}")); then make the writer '
            "use one encoding",
        )
        return
    if found.encoding in text.SINGLE_BYTE:
        evidence = (f"a single-byte encoding: {found.score:.0%} of its non-ASCII characters read "
                    f"as letters inside words or signs beside text in it: {found.examples}")  # fmt: skip
    else:
        evidence = f"{found.score:.0%} of its non-ASCII characters are common ones in it"
    diag.add(f"not UTF-8: {where}; the text is likely {found.label} ({evidence})", found.how_to_read(name))
