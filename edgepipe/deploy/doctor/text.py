"""Which encoding a text file is in, and where UTF-8 fails on it.

Written with the standard library's codecs and simple evidence, no detector package: the byte
order marks first; then UTF-8 (the first byte it cannot decode, with its line and column);
then each legacy encoding that decodes the sample without error is scored by the share of its
characters that are the common ones of that script (GB2312's level-1 hanzi for GBK/GB18030,
Big5's frequent characters, kana and JIS level-1 kanji for Shift-JIS). Text in one of them,
read as another, decodes to rare characters or fails, so the highest score is the likely one.
A single-byte encoding decodes any bytes, so its evidence is where the characters fall. In
Western text (Latin-1, Windows-1252) a non-ASCII character is an accented letter inside a word
of ASCII letters (``Größe``, ``café``) or a sign beside ASCII text (``25 °C``, ``« oui »``); in
Cyrillic text (Windows-1251, KOI8-R) it is a small letter inside a word of Cyrillic letters
(read in the other of the two, the letters' case swaps). The two-byte characters of the CJK
encodings read as either are runs of unlikely characters, which score little. UTF-16 without a
BOM is told by the zero bytes of its ASCII characters.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass

from edgepipe.deploy.quoting import python_literal, shell_arg

SAMPLE_BYTES = 256 * 1024
"""How much of a text file is read."""
TEXT_EXTENSIONS = frozenset(
    {".txt", ".csv", ".tsv", ".json", ".jsonl", ".srt", ".vtt", ".ass", ".md", ".log", ".xml",
     ".yaml", ".yml", ".toml", ".ini", ".cfg", ".html", ".htm", ".sub", ".lrc", ".names", ".labels"}
)  # fmt: skip
LEGACY = ("gb18030", "big5", "shift_jis", "latin-1", "cp1251", "koi8_r")
"""The encodings scored where UTF-8 fails (``latin-1`` stands for Windows-1252 too: see
:func:`_western_codec`)."""
SINGLE_BYTE = frozenset({"latin-1", "cp1252", "cp1251", "koi8_r"})
LABELS = {"gb18030": "GBK/GB18030 (Simplified Chinese)", "big5": "Big5 (Traditional Chinese)",
          "shift_jis": "Shift-JIS (Japanese)", "utf-16-le": "UTF-16 LE", "utf-16-be": "UTF-16 BE",
          "utf-8": "UTF-8", "utf-8-sig": "UTF-8 with a BOM", "utf-16": "UTF-16",
          "latin-1": "Latin-1 (ISO-8859-1)", "cp1252": "Windows-1252 (Western)",
          "cp1251": "Windows-1251 (Cyrillic)", "koi8_r": "KOI8-R (Cyrillic)"}  # fmt: skip
ICONV = {"gb18030": "GB18030", "big5": "BIG5", "shift_jis": "SHIFT_JIS", "utf-16-le": "UTF-16LE",
         "utf-16-be": "UTF-16BE", "utf-16": "UTF-16", "latin-1": "ISO-8859-1",
         "cp1252": "WINDOWS-1252", "cp1251": "WINDOWS-1251", "koi8_r": "KOI8-R"}  # fmt: skip
WESTERN_SIGNS = frozenset("\xa0¡¢£¥§©«®°±²³µ·¹º»¼½¾¿×÷€‚„…†‡•–—‘’“”‹›™")  # noqa: RUF001
"""Signs a Western text writes beside its ASCII (a space, a digit, a word): currencies, degrees,
quotes, dashes."""
MIN_SCORE = 0.6
"""Below this share of common characters no legacy encoding is named (binary, or mixed)."""


@dataclass(frozen=True)
class TextGuess:
    encoding: str
    """A Python codec name (``utf-8``, ``gb18030`` …), or ``unknown``."""
    score: float
    """The evidence: the share of its non-ASCII characters that are common ones (1.0 for a BOM)."""
    bom: bool = False
    bad_offset: int | None = None
    """The first byte UTF-8 cannot decode, None when it decodes."""
    bad_line: int | None = None
    bad_column: int | None = None
    bad_bytes: bytes = b""
    scores: tuple[tuple[str, float], ...] = ()
    mixed: bool = False
    """UTF-8 with non-ASCII characters before the first bad byte: two encodings in one file."""
    examples: str = ""
    """A few of the non-ASCII characters it decodes to (the evidence a person can read)."""

    @property
    def label(self) -> str:
        return LABELS.get(self.encoding, self.encoding)

    def how_to_read(self, path: str) -> str:
        """``open(path, encoding=...)`` and the iconv command that converts it to UTF-8, each
        with the name written as Python and the shell read it back (:mod:`.quoting`)."""
        code = f'open({python_literal(path)}, encoding="{self.encoding}")'
        iconv = ICONV.get(self.encoding)
        if iconv is None:
            return f"read it with {code}"
        folder, _, name = path.rpartition("/")
        stem, dot, suffix = name.rpartition(".")
        out = (folder + "/" if folder else "") + (f"{stem}.utf8.{suffix}" if dot and stem else name + ".utf8")
        convert = f"iconv -f {iconv} -t UTF-8 {shell_arg(path)} > {shell_arg(out)}"
        return f"read it with {code}, or convert it once: {convert}"


def looks_like_text(sample: bytes) -> bool:
    """Text in some encoding, not a binary format (control bytes other than tab/newlines are rare)."""
    if not sample:
        return False
    if sample.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or _utf16_order(sample):
        return True
    controls = sum(1 for b in sample[:8192] if b < 32 and b not in (9, 10, 12, 13, 27))
    return controls <= len(sample[:8192]) // 100


def guess(sample: bytes) -> TextGuess:
    """The likely encoding of ``sample`` (a file's first :data:`SAMPLE_BYTES`)."""
    for bom, name in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                      (codecs.BOM_UTF16_BE, "utf-16")):  # fmt: skip
        if sample.startswith(bom):
            return TextGuess(name, 1.0, bom=True)
    order = _utf16_order(sample)
    if order is not None and _decodes(sample, order):
        return TextGuess(order, 1.0)
    bad = _first_bad_utf8(sample)
    if bad is None:
        return TextGuess("utf-8", 1.0)
    offset = bad
    line = sample.count(b"\n", 0, offset) + 1
    column = offset - (sample.rfind(b"\n", 0, offset) + 1) + 1
    line_start = sample.rfind(b"\n", 0, offset) + 1
    mixed = max(sample[:line_start], default=0) >= 0x80
    where = {"bad_offset": offset, "bad_line": line, "bad_column": column,
             "bad_bytes": sample[offset : offset + 4], "mixed": mixed}  # fmt: skip
    # The evidence is what UTF-8 fails on (from that line on): a file whose start is UTF-8 and
    # whose appended lines are GBK is scored on the GBK.
    rest = sample[line_start:]
    scores = tuple((name, _score(rest, name)) for name in LEGACY)
    best, score = max(scores, key=lambda s: s[1])
    if score < MIN_SCORE:
        return TextGuess("unknown", score, scores=scores, **where)  # type: ignore[arg-type]
    if best == "latin-1":
        best = _western_codec(rest)
    text = codecs.decode(rest, best, "replace")
    examples = "".join(dict.fromkeys(c for c in text if ord(c) > 0x7F and not c.isspace()))[:8]
    return TextGuess(best, score, scores=scores, examples=examples, **where)  # type: ignore[arg-type]


def _first_bad_utf8(sample: bytes) -> int | None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(sample, final=False)  # a character cut by the sample's end is not an error
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def _utf16_order(sample: bytes) -> str | None:
    """``utf-16-le``/``-be`` when one byte of each pair is mostly zero (its ASCII characters)."""
    n = min(len(sample), 8192) // 2 * 2
    if n < 4:
        return None
    even = sample[0:n:2].count(0) / (n // 2)
    odd = sample[1:n:2].count(0) / (n // 2)
    # ASCII characters put a zero in one byte of their pair; a CJK character rarely does (U+5F00)
    if odd >= 0.1 and even <= odd / 8:
        return "utf-16-le"
    if even >= 0.1 and odd <= even / 8:
        return "utf-16-be"
    return None


def _decodes(sample: bytes, encoding: str) -> bool:
    try:
        codecs.getincrementaldecoder(encoding)().decode(sample, final=False)
    except UnicodeDecodeError:
        return False
    return True


def _score(sample: bytes, encoding: str) -> float:
    """The share of the non-ASCII characters ``sample`` decodes to that are common in that
    encoding's language; 0 when it does not decode."""
    if encoding in ("cp1251", "koi8_r"):
        return _cyrillic(codecs.decode(sample, encoding, "replace"))
    if encoding in SINGLE_BYTE:
        return _western(codecs.decode(sample, _western_codec(sample), "replace"))
    try:
        text = codecs.getincrementaldecoder(encoding)().decode(sample, final=False)
    except UnicodeDecodeError:
        return 0.0
    wide = [c for c in text if ord(c) > 0x7F]
    if not wide:
        return 0.0
    common = sum(1 for c in wide if _common(c, encoding))
    return common / len(wide)


def _western_codec(sample: bytes) -> str:
    """``cp1252`` where bytes 0x80-0x9F are there and read as Windows-1252's signs (curly quotes,
    dashes, the euro), else ``latin-1`` (which reads the other bytes as Windows-1252 does)."""
    if not any(0x80 <= b <= 0x9F for b in sample):
        return "latin-1"
    try:
        codecs.getincrementaldecoder("cp1252")().decode(sample, final=False)
    except UnicodeDecodeError:
        return "latin-1"
    return "cp1252"


def _western(text: str) -> float:
    """The share of ``text``'s non-ASCII characters that sit as they do in Western text: a letter
    next to an ASCII letter (inside a word), or a :data:`WESTERN_SIGNS` sign next to ASCII."""

    def fits(char: str, near: str) -> bool:
        if char.isalpha():
            return any(c.isascii() and c.isalpha() for c in near)
        return char in WESTERN_SIGNS and any(c.isascii() for c in near)

    return _share(text, fits)


def _cyrillic(text: str) -> float:
    """The share of ``text``'s non-ASCII characters that are small Cyrillic letters next to
    another Cyrillic letter: words of Russian, Ukrainian, Bulgarian … read in the right one of
    the two common encodings (KOI8-R read as Windows-1251, or the reverse, swaps the letters'
    case; Latin-1 accents read as either are single letters between ASCII ones)."""
    return _share(
        text, lambda char, near: char.islower() and _is_cyrillic(char) and any(map(_is_cyrillic, near))
    )


def _share(text: str, fits: Callable[[str, str], bool]) -> float:
    """The share of ``text``'s non-ASCII characters for which ``fits(char, its neighbours)``."""
    wide = good = 0
    for i, char in enumerate(text):
        if ord(char) <= 0x7F:
            continue
        wide += 1
        good += fits(char, (text[i - 1] if i else "") + text[i + 1 : i + 2])
    return good / wide if wide else 0.0


def _is_cyrillic(char: str) -> bool:
    return "\u0400" <= char <= "\u04ff" and char.isalpha()


def _common(char: str, encoding: str) -> bool:
    if encoding == "gb18030":
        try:
            code = char.encode("gb2312")
        except UnicodeEncodeError:
            return False
        return 0xA1 <= code[0] <= 0xD7  # symbols, punctuation and the 3,755 level-1 hanzi
    if encoding == "big5":
        try:
            code = char.encode("big5")
        except UnicodeEncodeError:
            return False
        return 0xA1 <= code[0] <= 0xC6  # symbols and the 5,401 frequent characters
    if "\u3040" <= char <= "\u30ff":  # hiragana, katakana
        return True
    try:
        code = char.encode("shift_jis")
    except UnicodeEncodeError:
        return False
    return len(code) == 2 and 0x81 <= code[0] <= 0x98  # symbols, kana and level-1 kanji
