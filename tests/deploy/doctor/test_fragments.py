"""doctor on a fragmented recording (edgepipe's own): whole fragments are healthy, a tail cut
mid-fragment is "truncated" with the time it lacks, never "damaged"."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from edgepipe.cli.main import main
from edgepipe.deploy.doctor.magic import sniff
from edgepipe.deploy.doctor.report import Diagnosis
from edgepipe.deploy.doctor.structure import check
from edgepipe.media.frame import from_planes, nv12_views
from edgepipe.media.recording.recorder import Recorder
from edgepipe.media.sources.synthetic import MATRIX, Scene

FPS = 15


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """3.3 s at 15 fps: fragments from 0, 1, 2 and 3 s (15, 15, 15 and 5 frames)."""
    out = tmp_path_factory.mktemp("fragments") / "rec.mp4"
    recorder = Recorder(out, fps=FPS)
    recorder.start()
    scene = Scene(160, 120)
    for seq in range(50):
        y, uv = nv12_views(np.empty(160 * 120 * 3 // 2, np.uint8), 160, 120)
        scene.draw(seq, y, uv)
        frame = from_planes(y, uv, matrix=MATRIX, seq=seq)
        frame.t_decoded_ns = seq * 1_000_000_000 // FPS
        recorder.process(frame)
    recorder.stop()
    return out.read_bytes()


def diagnosed(data: bytes, name: str = "rec.mp4") -> Diagnosis:
    diag = Diagnosis(name, sniff(data[:65536]).kind, None, len(data))
    check(io.BytesIO(data), len(data), diag)
    return diag


def fragment_starts(data: bytes) -> list[int]:
    return [i - 4 for i in range(len(data)) if data.startswith(b"moof", i)]


def test_a_whole_recording_and_one_killed_between_fragments_are_healthy(recording: bytes) -> None:
    whole = diagnosed(recording)
    assert whole.problems == []
    assert whole.details["fragments"] == {
        "whole": 4,
        "finished": True,
        "whole_s": pytest.approx(3.333, abs=0.001),
    }
    killed = diagnosed(recording[: fragment_starts(recording)[-1]])  # ends after a whole fragment
    assert killed.problems == []
    assert killed.details["fragments"] == {"whole": 3, "finished": False, "whole_s": 3.0}


def test_a_tail_cut_mid_fragment_is_truncated_with_the_time_it_lacks(recording: bytes) -> None:
    third = fragment_starts(recording)[2]  # frames 30-44, 2.0 s to 3.0 s
    cut = recording[: third + (fragment_starts(recording)[3] - third) // 2]
    [problem] = diagnosed(cut).problems
    assert problem.what.startswith("truncated: a fragmented MP4 cut short at byte ")
    assert "damaged" not in problem.what
    assert "nothing before the cut is damaged" in problem.fix
    facts = diagnosed(cut).details["fragments"]
    assert facts["whole"] == 2
    # Frames take more bytes than the index at the fragment's start: more than half are cut.
    assert 500 <= facts["missing_ms"] <= 1000
    assert facts["playable_s"] == pytest.approx(3.0 - facts["missing_ms"] / 1000, abs=0.001)
    assert f"at least {facts['missing_ms']} ms are missing (the cut fragment's last frames)" in problem.what
    assert "2 whole fragment(s)" in problem.what


def test_a_cut_inside_a_fragments_own_index_lacks_about_one_fragment(recording: bytes) -> None:
    third = fragment_starts(recording)[2]
    [problem] = diagnosed(recording[: third + 20]).problems
    assert problem.what.startswith("truncated: ")
    assert "about 1000 ms, as long as the one before" in problem.what
    assert "the first 2.000 s are whole and play" in problem.what


@pytest.mark.slow
def test_doctor_exits_1_for_a_truncated_recording_and_0_for_a_killed_one(
    recording: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    killed, cut = tmp_path / "killed.mp4", tmp_path / "cut.mp4"
    killed.write_bytes(recording[: fragment_starts(recording)[-1]])
    cut.write_bytes(recording[:-2000])
    assert main(["doctor", "--frames", "1000", str(killed)]) == 0  # 45 frames: all of them decode
    assert main(["doctor", str(cut)]) == 1
    out = capsys.readouterr().out
    assert "killed.mp4: MP4, " in out
    assert "3 whole fragments (3 s), no index at its end (its writer was killed or still writes)" in out
    assert "problem: truncated: a fragmented MP4 cut short" in out


def _cut_in_first_fragment(recording: bytes, frames_whole: int) -> bytes:
    """The recording cut inside its first fragment's samples, after ``frames_whole`` whole frames."""
    first = fragment_starts(recording)[0]
    mdat = first + int.from_bytes(recording[first : first + 4], "big")
    assert recording[mdat + 4 : mdat + 8] == b"mdat"
    probe = diagnosed(recording[: fragment_starts(recording)[1] - 1])  # the first fragment's tail cut
    assert probe.details["fragments"]["whole"] == 0
    if frames_whole == 0:
        return recording[: mdat + 8 + 10]  # inside the first frame (a key frame of some kB)
    lo, hi = mdat + 8, fragment_starts(recording)[1] - 1
    while lo < hi:  # the shortest cut that keeps frames_whole frames whole
        mid = (lo + hi) // 2
        facts = diagnosed(recording[:mid]).details["fragments"]
        if round(facts["playable_s"] * FPS) >= frames_whole:
            hi = mid
        else:
            lo = mid + 1
    return recording[:lo]


@pytest.mark.parametrize("frames_whole", [0, 4])
def test_what_a_cut_first_fragment_says_plays_is_what_pyav_decodes(
    recording: bytes, tmp_path: Path, frames_whole: int
) -> None:
    from edgepipe.deploy.doctor.diagnose import diagnose

    path = tmp_path / "early.mp4"
    path.write_bytes(_cut_in_first_fragment(recording, frames_whole))
    diag = diagnose(path, frames=100)
    [problem] = diag.problems
    decoded = diag.details["decode"].get("frames", 0)
    assert decoded == frames_whole  # PyAV, in doctor's own decode child
    if frames_whole == 0:
        assert "no frame is whole: nothing plays" in problem.what
        assert "play" not in problem.fix.replace("nothing plays", "")  # no word of a part that plays
        assert "nothing to keep" in problem.fix
    else:
        seconds = f"{frames_whole / FPS:.3f} s"
        assert f"the first {seconds} are whole and play" in problem.what
        assert f"players play its first {seconds}" in problem.fix
        assert "nothing plays" not in problem.what + problem.fix
