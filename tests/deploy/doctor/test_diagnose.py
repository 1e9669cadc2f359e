from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from edgepipe.deploy.doctor.diagnose import diagnose, walk
from scripts.make_doctor_samples import NOTES


def test_walk_is_recursive_sorted_and_skips_hidden_names(tmp_path: Path) -> None:
    for name in ("b/2.txt", "a.txt", ".hidden/x.txt", "b/.y.txt", "b/c/3.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    files, missing = walk([str(tmp_path), str(tmp_path / "nope.jpg"), str(tmp_path / "a.txt")])
    assert [p.relative_to(tmp_path).as_posix() for p in files] == ["a.txt", "b/2.txt", "b/c/3.txt", "a.txt"]
    assert missing == [str(tmp_path / "nope.jpg")]


def test_an_error_page_saved_as_a_video(tmp_path: Path) -> None:
    path = tmp_path / "clip.mp4"
    path.write_text("<!DOCTYPE html>\n<html><body>403 Forbidden</body></html>\n")
    diag = diagnose(path)
    [problem] = diag.problems
    assert (diag.kind, diag.extension_kind) == ("text", "mp4")
    assert "named .mp4 (MP4) but it is text, starting '<!DOCTYPE html>'" in problem.what
    assert "error page" in problem.fix


def test_unknown_bytes_with_a_media_name_and_without(tmp_path: Path) -> None:
    (tmp_path / "x.png").write_bytes(bytes(range(256)))
    [problem] = diagnose(tmp_path / "x.png").problems
    assert "are not PNG" in problem.what
    assert "00 01 02 03" in problem.what
    (tmp_path / "model.bin").write_bytes(bytes(range(256)))
    diag = diagnose(tmp_path / "model.bin")
    assert diag.problems == []
    assert diag.details["note"] == "neither media nor text: not checked"


def test_text_named_as_text_with_its_encoding(tmp_path: Path) -> None:
    (tmp_path / "ok.csv").write_text("camera,note\n" + NOTES, encoding="utf-8")
    diag = diagnose(tmp_path / "ok.csv")
    assert diag.problems == []
    assert diag.details["encoding"] == "utf-8"
    (tmp_path / "bom.csv").write_text(NOTES, encoding="utf-8-sig")
    assert diagnose(tmp_path / "bom.csv").details["encoding"] == "utf-8-sig"
    (tmp_path / "u16.srt").write_text(NOTES, encoding="utf-16")
    [problem] = diagnose(tmp_path / "u16.srt").problems
    assert "UTF-16 text (with a BOM), not UTF-8" in problem.what
    assert 'encoding="utf-16"' in problem.fix


def test_a_file_with_utf8_then_gbk_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes("启动\n".encode() + "摄像头离线\n".encode("gbk"))
    [problem] = diagnose(path).problems
    assert "two encodings in one file" in problem.what
    assert "line 2" in problem.what
    assert 'line.decode("gb18030")' in problem.fix


@pytest.mark.parametrize("name", ["empty.jpg", "empty.txt", "empty"])
def test_an_empty_file_whatever_its_name(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"")
    diag = diagnose(tmp_path / name)
    assert diag.kind == "empty"
    [problem] = diag.problems
    assert problem.what == "empty file (0 bytes)"
    assert "copy it again" in problem.fix


@pytest.mark.slow
@pytest.mark.parametrize("name", ["whole.h264", "whole.h265", "whole.mkv", "whole.ts"])
def test_whole_streams_and_containers_decode(make_clip: Callable[..., Path], name: str) -> None:
    path = make_clip("doctor-" + name, width=160, height=120, fps=10, seconds=1)
    diag = diagnose(path, frames=4)
    assert diag.problems == [], diag.problems
    assert diag.details["decode"]["frames"] == 4
    assert diag.kind == {"h264": "h264", "h265": "h265", "mkv": "mkv", "ts": "mpegts"}[name.split(".")[1]]


@pytest.mark.slow
def test_a_raw_h264_stream_named_mp4_is_a_mismatch_but_decodes(make_clip: Callable[..., Path],
                                                                 tmp_path: Path) -> None:  # fmt: skip
    raw = make_clip("doctor-raw.h264", width=160, height=120, fps=10, seconds=1)
    path = tmp_path / "clip.mp4"
    path.write_bytes(raw.read_bytes())
    diag = diagnose(path, frames=2)
    [problem] = diag.problems
    assert "named .mp4 (MP4) but its bytes are raw H.264 (Annex B)" in problem.what
    assert "rename it to clip.h264" in problem.fix
    assert diag.details["decode"]["frames"] == 2  # FFmpeg reads it by its content


def test_binary_bytes_named_as_text_are_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(bytes(range(256)) * 4)
    diag = diagnose(path)
    [problem] = diag.problems
    assert "named .txt (text) but it is binary" in problem.what
    assert "00 01 02 03" in problem.what


def test_a_fifo_or_a_device_is_named_and_never_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "camera.mp4"
    os.mkfifo(fifo)  # opening it for reading would block until a writer came
    diag = diagnose(fifo)
    [problem] = diag.problems
    assert diag.kind == "special"
    assert "not a regular file but a FIFO (named pipe)" in problem.what
    [problem] = diagnose(Path("/dev/zero")).problems
    assert "not a regular file but a character device" in problem.what
