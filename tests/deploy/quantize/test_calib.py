from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
from skimage import data

from edgepipe.deploy.quantize.calib import CalibError, read_frames, spaced


def test_spaced_indices_cover_the_whole_length_once_each() -> None:
    assert spaced(4, 100) == [12, 37, 62, 87]
    assert spaced(5, 3) == [0, 1, 2]
    assert spaced(0, 10) == []
    assert spaced(3, 0) == []


def test_a_clip_gives_calibration_and_held_out_frames_that_never_overlap(
    make_clip: Callable[..., Path],
) -> None:
    clip = make_clip("calib.mp4", width=320, height=192, fps=15, seconds=2)
    sets = read_frames(clip, 6, 3)
    assert (len(sets.calibration), len(sets.held_out)) == (6, 3)
    calib_pts = {f.pts for f in sets.calibration}
    held_pts = sorted(f.pts for f in sets.held_out)
    assert not calib_pts & set(held_pts)
    # Spread over the clip, not the first frames: the last held-out frame is in its second half.
    everything = sorted(calib_pts | set(held_pts))
    assert held_pts[-1] > everything[len(everything) // 2]
    assert all((f.width, f.height) == (320, 192) for f in sets.calibration + sets.held_out)


def _png(path: Path, rgb: np.ndarray) -> Path:
    with av.open(str(path), "w", format="image2") as out:
        stream = out.add_stream("png")
        stream.width, stream.height, stream.pix_fmt = rgb.shape[1], rgb.shape[0], "rgb24"
        for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def test_a_folder_of_images_is_read_in_name_order_and_split(tmp_path: Path) -> None:
    photo = data.astronaut()
    for i in range(4):
        _png(tmp_path / f"{i}.png", np.ascontiguousarray(np.roll(photo, i * 40, axis=1)[:192, :320]))
    (tmp_path / "notes.txt").write_text("not a picture")
    sets = read_frames(tmp_path, 3, 1)
    assert len(sets.calibration) == 3
    assert len(sets.held_out) == 1
    assert sorted(f.source_id for f in sets.calibration + sets.held_out) == [
        "0.png",
        "1.png",
        "2.png",
        "3.png",
    ]
    # The pixels are the picture's: the astronaut's face is not grey.
    assert sets.calibration[0].to_rgb().std() > 20


def test_inputs_that_give_no_frames_are_refused_naming_them(tmp_path: Path) -> None:
    with pytest.raises(CalibError, match="no images"):
        read_frames(tmp_path, 4, 2)
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00" * 100)
    with pytest.raises(CalibError, match=r"broken\.mp4"):
        read_frames(broken, 4, 2)
    with pytest.raises(CalibError, match="no such file"):
        read_frames(tmp_path / "missing.mp4", 4, 2)


def test_frames_far_apart_are_sought_to_and_taken_where_they_are_wanted(
    make_clip: Callable[..., Path],
) -> None:
    clip = make_clip("long.mp4", width=320, height=192, fps=15, seconds=4)
    sets = read_frames(clip, 3, 1)
    times = sorted(f.time_s or 0.0 for f in sets.calibration + sets.held_out)
    # spaced(4, 60) = frames 7, 22, 37 and 52 of 60, at 15 fps.
    assert times == pytest.approx([7 / 15, 22 / 15, 37 / 15, 52 / 15], abs=1.5 / 15)
