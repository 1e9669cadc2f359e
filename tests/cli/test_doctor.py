"""``edgepipe doctor`` as a user runs it: the issue's acceptance files (a PNG named .jpg, a
truncated JPEG, GBK and Latin-1 text files, a zero-byte file, MP4s cut in half), made from a real photo
by scripts/make_doctor_samples.py; each message says what is wrong and what to do."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scripts.make_doctor_samples import make
from tests.support.cli_process import edgepipe

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("doctor")
    make(root)
    return root


def doctor(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return edgepipe("doctor", *args)


def by_name(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in json.loads(done.stdout)["files"]}


def test_healthy_files_exit_0(samples: Path) -> None:
    done = doctor(samples / "good")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok\n") == 5
    assert "doctor: 0 of 5 files with problems" in done.stdout


def test_each_broken_file_says_what_is_wrong_and_what_to_do(samples: Path) -> None:
    done = doctor(samples / "bad", "--format", "json")
    assert done.returncode == 1, done.stderr
    files = by_name(done)
    assert set(files) == {"screenshot.jpg", "cut.jpg", "notes-gbk.txt", "notes-latin1.txt", "empty.mp4",
                          "clip-cut.mp4", "clip-faststart-cut.mp4"}  # fmt: skip

    def only(name: str) -> dict[str, str]:
        [problem] = files[name]["problems"]
        return problem  # type: ignore[no-any-return]

    png = only("screenshot.jpg")
    assert (files["screenshot.jpg"]["kind"], files["screenshot.jpg"]["extension_kind"]) == ("png", "jpeg")
    assert "named .jpg (JPEG) but its bytes are PNG (89 50 4E 47 0D 0A 1A 0A)" in png["what"]
    assert "rename it to screenshot.png" in png["fix"]

    cut = only("cut.jpg")
    assert "without its end marker (FF D9)" in cut["what"]
    assert "copy" in cut["fix"]
    assert files["cut.jpg"]["details"]["decode"]["log"]  # FFmpeg's own words: EOI missing

    gbk = only("notes-gbk.txt")
    assert "not UTF-8: byte 0 (line 1, column 1)" in gbk["what"]
    assert "GBK/GB18030" in gbk["what"]
    assert 'encoding="gb18030"' in gbk["fix"]
    assert "iconv -f GB18030 -t UTF-8" in gbk["fix"]
    assert files["notes-gbk.txt"]["details"]["encoding"] == "gb18030"

    latin1 = only("notes-latin1.txt")  # a clean single-byte file: named, not "mixed or damaged"
    assert "the text is likely Latin-1 (ISO-8859-1) (a single-byte encoding" in latin1["what"]
    assert "damage" not in latin1["what"]
    assert "iconv -f ISO-8859-1 -t UTF-8" in latin1["fix"]
    assert files["notes-latin1.txt"]["details"]["encoding"] == "latin-1"

    empty = only("empty.mp4")
    assert empty["what"] == "empty file (0 bytes)"
    assert "copy it again" in empty["fix"]

    no_moov = only("clip-cut.mp4")
    assert "MP4 cut short" in no_moov["what"]
    assert "no 'moov' box" in no_moov["what"]
    assert "moov atom not found" in no_moov["what"]  # what PyAV said, as evidence
    assert "frag_keyframe+empty_moov" in no_moov["fix"]

    faststart = only("clip-faststart-cut.mp4")
    assert "MP4 cut short" in faststart["what"]
    assert "index (moov) is whole" in faststart["what"]
    # Keeping what decodes before the cut is offered only where something does.
    decoded = files["clip-faststart-cut.mp4"]["details"]["decode"]["frames"]
    assert ("-c copy" in faststart["fix"]) == (decoded > 0), (decoded, faststart["fix"])
    assert ("nothing to keep" in faststart["fix"]) == (decoded == 0), (decoded, faststart["fix"])
    assert files["clip-faststart-cut.mp4"]["details"]["top_level_boxes"][:2] == ["ftyp", "moov"]


def test_text_output_and_a_missing_path(samples: Path) -> None:
    done = doctor(samples / "bad" / "cut.jpg", samples / "nope.mp4", samples / "good" / "notes.txt")
    assert done.returncode == 2  # a path that does not exist; the others are still diagnosed
    assert f"edgepipe: error: {samples / 'nope.mp4'}: no such file or folder" in done.stderr
    assert "problem: JPEG without its end marker" in done.stdout
    assert "\n  fix: copy" in done.stdout
    assert "notes.txt: text, 184 bytes, UTF-8: ok" in done.stdout
    assert "doctor: 1 of 2 files with problems; 1 paths not found" in done.stdout
    assert "Traceback" not in done.stderr
