from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe.deploy.doctor import media as doctor_media
from edgepipe.deploy.doctor.media import decode_check, decoders_here
from edgepipe.deploy.doctor.report import Diagnosis
from scripts.make_doctor_samples import encode_image, photo, write_clip

pytestmark = pytest.mark.slow  # a decoder process per file


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("media")
    (folder / "photo.jpg").write_bytes(encode_image(photo(), "mjpeg"))
    write_clip(folder / "clip.mp4", photo(), faststart=False, frames=10)
    return {p.name: p for p in folder.iterdir()}


def test_a_clip_decodes_with_its_facts(files: dict[str, Path]) -> None:
    diag = Diagnosis(str(files["clip.mp4"]), "mp4", "mp4", 0)
    decode_check(diag, frames=4, timeout_s=30)
    assert diag.problems == []
    seen = diag.details["decode"]
    assert (seen["codec"], seen["width"], seen["height"], seen["frames"]) == ("h264", 320, 240, 4)
    assert seen["pix_fmt"] == "yuv420p"
    assert diag.details["decoders"]["software"] == "h264"
    assert diag.details["decoded_bytes"] == 3 * 320 * 240 * 3 // 2


def test_a_picture_larger_than_the_budget_is_not_decoded(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doctor_media, "budget_bytes", lambda: 100_000)
    diag = Diagnosis(str(files["photo.jpg"]), "jpeg", "jpeg", 0)
    decode_check(diag, frames=1, timeout_s=30)
    [problem] = diag.problems
    assert "one 450x300 picture decoded to RGB needs 0.4 MB" in problem.what
    assert "memory budget of 0.1 MB" in problem.what
    assert "scale it down" in problem.fix
    assert diag.details["decode"]["skipped"]
    assert diag.details["decode"]["frames"] == 0


def test_a_decoder_past_its_deadline_is_stopped_and_the_file_not_called_damaged(
    files: dict[str, Path],
) -> None:
    diag = Diagnosis(str(files["clip.mp4"]), "mp4", "mp4", 0)
    decode_check(diag, frames=4, timeout_s=0.01)  # not even Python starts in 10 ms: a healthy clip
    assert diag.problems == []
    assert diag.unchecked.startswith("not checked in time (raise --timeout-s)")
    assert "within 0.01 s" in diag.unchecked
    assert "damaged" not in diag.unchecked


def test_not_media_at_all(tmp_path: Path) -> None:
    path = tmp_path / "x.mp4"
    path.write_bytes(b"\x00\x00\x00\x18ftypisom" + bytes(range(256)) * 8)
    diag = Diagnosis(str(path), "mp4", "mp4", 0)
    decode_check(diag, frames=4, timeout_s=30)
    [problem] = diag.problems
    assert problem.what.startswith("FFmpeg cannot open it")


def test_decoders_of_a_codec_this_build_lacks() -> None:
    assert decoders_here("no-such-codec") == {"software": None, "hardware": []}
    assert decoders_here("png")["hardware"] == []  # no hwaccel decodes PNG
