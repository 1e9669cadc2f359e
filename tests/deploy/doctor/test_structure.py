from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from edgepipe.deploy.doctor.magic import sniff
from edgepipe.deploy.doctor.report import Diagnosis
from edgepipe.deploy.doctor.structure import check
from scripts.make_doctor_samples import encode_image, photo, write_clip


def diagnosed(data: bytes, name: str = "x") -> Diagnosis:
    found = sniff(data[: 64 * 1024])
    diag = Diagnosis(name, found.kind, None, len(data), details=dict(found.details))
    check(io.BytesIO(data), len(data), diag)
    return diag


@pytest.fixture(scope="module")
def png() -> bytes:
    return encode_image(photo(), "png")


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("structure_clips")
    for name, faststart in (("normal", False), ("faststart", True)):
        write_clip(folder / f"{name}.mp4", photo(), faststart=faststart, frames=10)
    return {p.stem: p.read_bytes() for p in folder.glob("*.mp4")}


def test_whole_files_have_no_problem(png: bytes, clips: dict[str, bytes]) -> None:
    for data in (png, encode_image(photo(), "mjpeg"), *clips.values()):
        assert diagnosed(data).problems == []


def test_a_jpeg_cut_short_lacks_its_end_marker() -> None:
    jpeg = encode_image(photo(), "mjpeg")
    [problem] = diagnosed(jpeg[: len(jpeg) * 2 // 3]).problems
    assert "without its end marker (FF D9)" in problem.what
    assert "copy" in problem.fix


def test_data_after_a_jpeg_end_marker_is_no_problem() -> None:
    diag = diagnosed(encode_image(photo(), "mjpeg") + b"trailer")
    assert diag.problems == []
    assert diag.details["bytes_after_end_marker"] == 7


def test_a_png_cut_inside_a_chunk_and_one_without_iend(png: bytes) -> None:
    [cut] = diagnosed(png[:5000]).problems
    assert "chunk 'IDAT'" in cut.what
    assert "no IEND" in cut.what
    [no_end] = diagnosed(png[:-12]).problems  # the IEND chunk is the last 12 bytes
    assert "without its IEND chunk" in no_end.what


def test_an_mp4_cut_in_half_either_way(clips: dict[str, bytes]) -> None:
    normal, faststart = clips["normal"], clips["faststart"]
    [no_index] = diagnosed(normal[: len(normal) // 2]).problems
    assert "'mdat'" in no_index.what
    assert "no 'moov' box" in no_index.what
    assert "movflags=frag_keyframe+empty_moov" in no_index.fix
    [indexed] = diagnosed(faststart[: len(faststart) // 2], "a.mp4").problems
    assert "index (moov) is whole" in indexed.what
    assert "bytes missing" in indexed.what
    assert "ffmpeg -i a.mp4 -c copy a.fixed.mp4" in indexed.fix


def test_an_mp4_that_ends_on_a_box_boundary_without_moov(clips: dict[str, bytes]) -> None:
    normal = clips["normal"]
    moov_at = normal.rfind(b"moov") - 4
    [problem] = diagnosed(normal[:moov_at]).problems
    assert "without a 'moov' box" in problem.what
    assert "index" in problem.what


def test_a_matroska_file_cut_short(make_clip: Callable[..., Path]) -> None:
    data = make_clip("structure.mkv", width=160, height=120, fps=10, seconds=1).read_bytes()
    diag = diagnosed(data)
    assert diag.problems == []
    assert diag.details["segment_end_byte"] == len(data)
    [problem] = diagnosed(data[: len(data) // 2]).problems
    assert "Matroska cut short" in problem.what
    assert f"the file has {len(data) // 2}" in problem.what


def test_an_mpegts_packet_without_its_sync_byte(make_clip: Callable[..., Path]) -> None:
    data = bytearray(make_clip("structure.ts", width=160, height=120, fps=10, seconds=1).read_bytes())
    assert diagnosed(bytes(data)).problems == []
    data[188 * 7] = 0x00
    [problem] = diagnosed(bytes(data)).problems
    assert "packet 7" in problem.what
    assert "sync byte 47" in problem.what


def test_a_few_bytes_are_too_short() -> None:
    [problem] = diagnosed(b"\x89PNG\r\n\x1a\n\x00\x00").problems
    assert "only 10 bytes" in problem.what
    assert "PNG" in problem.what
