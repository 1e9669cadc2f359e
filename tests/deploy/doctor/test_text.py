from __future__ import annotations

import codecs
import os
from pathlib import Path

import pytest

from edgepipe.deploy.doctor.diagnose import diagnose
from edgepipe.deploy.doctor.text import TextGuess, guess, looks_like_text
from edgepipe.deploy.quoting import shell_arg
from scripts.make_doctor_samples import NOTES

# Real text in each script, with its full-width punctuation.
TRADITIONAL = (
    "監視器 2 號：夜間畫面太暗，請檢查紅外線補光燈。\n"  # noqa: RUF001
    "錄影檔案保存在事件資料夾中，七天後自動刪除。\n"  # noqa: RUF001
)
JAPANESE = "カメラ 1 番：顔の検出は有効です。夜間は画面が暗くなるので、赤外線ライトを確認してください。\n"  # noqa: RUF001
HEADER = "camera,note\n"


@pytest.mark.parametrize(
    ("text", "encoding", "expected"),
    [
        (NOTES, "gbk", "gb18030"),
        (NOTES, "gb18030", "gb18030"),
        (TRADITIONAL, "big5", "big5"),
        (JAPANESE, "shift_jis", "shift_jis"),
    ],
)
def test_legacy_encodings_are_told_apart(text: str, encoding: str, expected: str) -> None:
    data = (HEADER + text).encode(encoding)
    found = guess(data)
    assert found.encoding == expected, found.scores
    assert found.score >= 0.9
    assert found.bad_offset == len(HEADER) + text.index(next(c for c in text if ord(c) > 0x7F))
    assert found.bad_line == 2
    assert not found.mixed
    assert found.bad_column == found.bad_offset - len(HEADER) + 1
    assert data[found.bad_offset : found.bad_offset + 1] == found.bad_bytes[:1]
    assert codecs.decode(data, found.encoding) == HEADER + text


def test_the_first_bad_byte_after_good_utf8_and_how_to_read() -> None:
    data = "第一行\n第二行\n".encode() + "第三行 GBK\n".encode("gbk")
    found = guess(data)
    assert (found.bad_offset, found.bad_line, found.bad_column) == (len("第一行\n第二行\n".encode()), 3, 1)
    assert found.encoding == "gb18030"
    assert found.mixed
    advice = found.how_to_read("notes.txt")
    assert 'encoding="gb18030"' in advice
    assert "iconv -f GB18030 -t UTF-8 notes.txt > notes.utf8.txt" in advice


def test_the_advice_for_a_file_whose_name_is_gbk_bytes_runs_as_shown(tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path) + "/夜间 笔记.txt".encode("gbk")
    Path(os.fsdecode(raw)).write_bytes((HEADER + NOTES).encode("gbk"))
    [problem] = diagnose(Path(os.fsdecode(raw))).problems
    # The name in Python's bytes form and in bash's $'...' form: each reads back as `raw`.
    assert f'open({raw!r}, encoding="gb18030")' in problem.fix
    converted = os.fsdecode(raw[: -len(".txt")] + b".utf8.txt")
    assert f"iconv -f GB18030 -t UTF-8 {shell_arg(os.fsdecode(raw))} > {shell_arg(converted)}" in problem.fix
    assert "$'" in problem.fix
    problem.fix.encode("utf-8")  # no surrogates left to print as U+FFFD or fail on
    name = f"{tmp_path}/it's a $file.txt"
    assert f"iconv -f GB18030 -t UTF-8 '{tmp_path}/it'\"'\"'s a $file.txt' >" in found_gbk().how_to_read(name)


def found_gbk() -> TextGuess:
    return guess((HEADER + NOTES).encode("gbk"))


@pytest.mark.parametrize(
    ("data", "encoding", "bom"),
    [
        (NOTES.encode("utf-8"), "utf-8", False),
        (codecs.BOM_UTF8 + NOTES.encode("utf-8"), "utf-8-sig", True),
        (codecs.BOM_UTF16_LE + NOTES.encode("utf-16-le"), "utf-16", True),
        (codecs.BOM_UTF16_BE + NOTES.encode("utf-16-be"), "utf-16", True),
        ((HEADER + NOTES).encode("utf-16-le"), "utf-16-le", False),
        ((HEADER + NOTES).encode("utf-16-be"), "utf-16-be", False),
    ],
)
def test_unicode_forms(data: bytes, encoding: str, bom: bool) -> None:
    found = guess(data)
    assert (found.encoding, found.bom, found.bad_offset) == (encoding, bom, None)
    assert looks_like_text(data)


def test_a_character_cut_by_the_sample_is_not_an_error() -> None:
    data = NOTES.encode()
    assert guess(data[:-2] if data[-1:] != b"\n" else data[:-3]).encoding == "utf-8"


def test_random_bytes_are_no_known_encoding() -> None:
    import numpy as np

    noise = np.random.default_rng(3).integers(0x80, 0x100, 4000, dtype=np.uint8).tobytes()
    found = guess(b"header\n" + noise)
    assert found.encoding == "unknown"
    assert found.bad_offset == 7


def test_binary_is_not_text() -> None:
    assert not looks_like_text(bytes(range(256)) * 4)
    assert not looks_like_text(b"")


WESTERN = (
    "Caméra 2 : entrée nord, détection activée à 15 images/s.\n"
    "Größe des Bildes: 640×480; Temperatur 21 °C, Außenlicht aus.\n"  # noqa: RUF001
    "Cámara del señor Muñoz: «grabación» guardada, ¿revisar mañana?\n"
)


def test_a_clean_latin_1_file_is_named_with_how_to_convert_it(tmp_path: Path) -> None:
    found = guess((HEADER + WESTERN).encode("latin-1"))
    assert found.encoding == "latin-1", found.scores
    assert found.score >= 0.9
    assert (found.bad_line, found.mixed) == (2, False)
    assert found.examples.startswith("é")  # the characters it reads, for a person to judge
    path = tmp_path / "notes.txt"
    path.write_bytes((HEADER + WESTERN).encode("latin-1"))
    [problem] = diagnose(path).problems
    assert "mixed encodings or damage" not in problem.what
    assert "the text is likely Latin-1 (ISO-8859-1) (a single-byte encoding" in problem.what
    assert f'open("{path}", encoding="latin-1")' in problem.fix
    assert f"iconv -f ISO-8859-1 -t UTF-8 {path} > {tmp_path}/notes.utf8.txt" in problem.fix


def test_windows_1252_is_told_by_its_quotes_and_euro_sign() -> None:
    text = HEADER + "Prix : 12 € — « d’accord » et “OK”.\n"  # noqa: RUF001
    found = guess(text.encode("cp1252"))
    assert found.encoding == "cp1252", found.scores
    assert found.label == "Windows-1252 (Western)"
    assert codecs.decode(text.encode("cp1252"), found.encoding) == text
    assert "iconv -f WINDOWS-1252 -t UTF-8" in found.how_to_read("prix.txt")


def test_utf8_with_latin_1_lines_after_it_is_two_encodings() -> None:
    found = guess("Café noir\n".encode() + WESTERN.encode("latin-1"))
    assert (found.encoding, found.mixed, found.bad_line) == ("latin-1", True, 2)


RUSSIAN = "Камера 2: вход с севера, обнаружение лиц включено. Запись хранится семь дней.\n"  # noqa: RUF001


@pytest.mark.parametrize("encoding", ["cp1251", "koi8_r"])
def test_cyrillic_single_byte_encodings_are_told_apart(encoding: str) -> None:
    found = guess((HEADER + RUSSIAN).encode(encoding))
    assert found.encoding == encoding, found.scores  # read as the other, the letters' case swaps
    assert codecs.decode((HEADER + RUSSIAN).encode(encoding), found.encoding) == HEADER + RUSSIAN


@pytest.mark.parametrize(
    ("text", "encoding"), [(NOTES, "gbk"), (TRADITIONAL, "big5"), (JAPANESE, "shift_jis")]
)
def test_two_byte_scripts_are_not_taken_for_a_single_byte_one(text: str, encoding: str) -> None:
    scores = dict(guess((HEADER + text).encode(encoding)).scores)
    assert max(scores["latin-1"], scores["cp1251"], scores["koi8_r"]) < 0.5
