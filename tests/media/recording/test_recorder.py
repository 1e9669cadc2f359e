from __future__ import annotations

import itertools
import os
from pathlib import Path

import av
import numpy as np
import pytest

from edgepipe import Pipeline
from edgepipe.core.errors import NodeError
from edgepipe.media.colour import Matrix
from edgepipe.media.frame import I420, NV12, Frame, from_av, from_planes, from_rgb, nv12_views
from edgepipe.media.recording.recorder import Recorder, fill_av_frame, pick_encoder
from edgepipe.media.sources.synthetic import MATRIX, Scene
from edgepipe.media.sources.video import VideoSource
from edgepipe.runner import RunConfig, run_async
from tests.support.colour_clips import PATCH, first_frame, make_colour_clip, picture, stream_tags


@pytest.mark.slow
async def test_records_live_nv12_to_an_mp4_that_plays(tmp_path: Path) -> None:
    out = tmp_path / "rec.mp4"
    recorder = Recorder(out, fps=30)
    p = Pipeline()
    p.sink("record", recorder, inputs=p.source("cam", VideoSource("synthetic://320x240@30")), policy="latest",
           queue_size=1)  # fmt: skip
    await run_async(p, RunConfig(governed=False, duration_s=1.0))
    assert recorder.frames >= 20
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert (stream.codec_context.name, frames[0].width, frames[0].height) == ("h264", 320, 240)
        assert len(frames) == recorder.frames
        duration = float(frames[-1].pts * stream.time_base)
    assert 0.7 < duration < 1.2  # timestamps follow decode times


async def test_records_i420_from_a_file(clip: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy.mkv"
    recorder = Recorder(out, fps=30)
    p = Pipeline()
    p.sink("record", recorder, inputs=p.source("cam", VideoSource(str(clip))))
    await run_async(p, RunConfig(governed=False))
    with av.open(str(out)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 60


async def test_unwritable_recording_path_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = Pipeline()
    p.sink(
        "record",
        Recorder(blocker / "sub" / "rec.mp4"),
        inputs=p.source("cam", VideoSource("synthetic://64x48@5")),
    )
    with pytest.raises(
        NodeError, match=r"node 'record': start\(\) failed: OutputError: .*rec\.mp4: cannot record here"
    ):
        await run_async(p, RunConfig(governed=False, duration_s=0.5))


def test_an_h264_encoder_is_always_found() -> None:
    assert pick_encoder(320, 240) in ("h264_nvenc", "h264_qsv", "h264_vaapi", "h264_v4l2m2m", "libx264")


def test_timestamps_follow_media_time_and_never_repeat(tmp_path: Path) -> None:
    # A file decoded faster than real time: decode times all within one millisecond, media
    # time 0.1 s apart. Then frames with no media time at all, decoded at the same instant.
    from fractions import Fraction

    recorder = Recorder(tmp_path / "t.mp4", fps=10)
    recorder.start()
    for seq in range(10):
        frame = from_rgb(np.full((64, 64, 3), seq * 20, np.uint8), seq=seq)
        frame.pts, frame.time_base, frame.t_decoded_ns = seq, Fraction(1, 10), 5_000_000
        recorder.process(frame)
    for seq in range(10, 13):
        frame = from_rgb(np.zeros((64, 64, 3), np.uint8), seq=seq)
        frame.t_decoded_ns = 5_000_000
        recorder.process(frame)
    recorder.stop()
    with av.open(str(tmp_path / "t.mp4")) as container:
        stream = container.streams.video[0]
        times = [float(f.pts * stream.time_base) for f in container.decode(stream)]
    assert len(times) == 13
    assert times[9] == pytest.approx(0.9, abs=0.002)
    assert all(b > a for a, b in itertools.pairwise(times))


@pytest.mark.parametrize(
    ("path", "kwargs", "message"),
    [
        ("", {}, r"Recorder needs a file path"),
        ("out.unknownext", {}, r"cannot record to out\.unknownext: .*; use a \.mp4, \.mkv or \.ts name"),
        ("out.mp4", {"fps": float("nan")}, r"fps must be a finite number above 0, got nan"),
        ("out.mp4", {"fps": -15}, r"fps must be a finite number above 0, got -15"),
        ("out.mp4", {"crf": 99}, r"crf must be an integer in \[0, 51\]"),
        (
            "out.mp4",
            {"encoder": "h264_nope"},
            r"Recorder encoder 'h264_nope' is not a video encoder FFmpeg has here \(H\.264 ones: .*libx264",
        ),
        ("out.mp4", {"encoder": "aac"}, r"Recorder encoder 'aac' is not a video encoder"),
    ],
)
def test_nonsense_is_refused_when_the_recorder_is_made(
    path: str, kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Recorder(path, **kwargs)  # type: ignore[arg-type]


def test_an_encoder_that_cannot_start_fails_the_recording_once_and_leaks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from edgepipe.media.recording.recorder import ENCODER_OPTIONS

    fds = len(os.listdir("/proc/self/fd"))
    unknown = Recorder(tmp_path / "unknown.mp4", fps=10)
    unknown.encoder = "h264_nope"  # past the check at declaration: the stream cannot be made
    monkeypatch.setitem(ENCODER_OPTIONS, "libx264", {"preset": "nope"})  # made, but does not open
    refused = Recorder(tmp_path / "refused.mp4", fps=10, encoder="libx264")
    for recorder, why in ((unknown, "h264_nope"), (refused, "libx264")):
        recorder.start()
        raised = []
        for seq in range(50):
            frame = from_rgb(np.zeros((48, 64, 3), np.uint8), seq=seq)
            frame.t_decoded_ns += seq * 100_000_000
            try:
                recorder.process(frame)
            except Exception as exc:  # what it raised, and how often, is the test
                raised.append(f"{type(exc).__name__}: {exc}")
        assert len(os.listdir("/proc/self/fd")) == fds  # not one descriptor per frame
        recorder.stop()
        assert len(raised) == 1, raised  # said once, not tried again for every frame
        assert raised[0].startswith(
            f"OutputError: {recorder.path}: cannot start the recording: the encoder {why}"
        )
        assert recorder.failed_output is not None
        assert recorder.failed_output.startswith(f"{recorder.path}: nothing recorded of 50 frame(s): ")
        assert not recorder.path.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_missing_folder_is_refused_at_start_not_created(tmp_path: Path) -> None:
    from edgepipe.core.errors import OutputError

    recorder = Recorder(tmp_path / "missing" / "rec.mp4")
    with pytest.raises(OutputError, match=r"rec\.mp4: cannot record here: .*missing does not exist"):
        recorder.start()
    assert list(tmp_path.iterdir()) == []


def test_no_frame_no_file_and_no_claim_of_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="edgepipe.media.recording.recorder")
    out = tmp_path / "rec.mp4"
    recorder = Recorder(out)
    recorder.start()
    recorder.stop()
    assert not out.exists()
    assert recorder.failed_output is None  # nothing came: nothing was lost either
    assert "recorded 0 frames" not in caplog.text
    assert "no frame came to record; nothing written" in caplog.text


@pytest.mark.parametrize(("matrix", "full_range", "width", "height"),
                         [("bt709", True, 1280, 720), ("bt601", False, 640, 480), ("bt709", False, 640, 360)])  # fmt: skip
def test_the_recording_is_tagged_as_its_input(
    tmp_path: Path, matrix: Matrix, full_range: bool, width: int, height: int
) -> None:
    clip = make_colour_clip(tmp_path / "in.mp4", matrix, full_range, width, height, frames=3)
    recorder = Recorder(tmp_path / "out.mp4", fps=10, encoder="libx264", crf=1)
    recorder.start()
    with av.open(str(clip)) as container:
        for seq, decoded in enumerate(container.decode(video=0)):
            recorder.process(from_av(decoded, source_id="clip", seq=seq))
    recorder.stop()
    assert stream_tags(tmp_path / "out.mp4") == stream_tags(clip)
    frame = from_av(first_frame(tmp_path / "out.mp4"), source_id="out", seq=0)
    assert (frame.matrix, frame.full_range) == (matrix, full_range)
    np.testing.assert_allclose(frame.to_rgb()[height // 2, width // 2].astype(int), PATCH, atol=2)


def test_synthetic_video_is_recorded_as_bt601_limited(tmp_path: Path) -> None:
    scene = Scene(1280, 720)  # HD, but the scene's YUV means BT.601 (tagged so, not guessed)
    buf = np.empty(1280 * 720 * 3 // 2, np.uint8)
    y, uv = nv12_views(buf, 1280, 720)
    scene.draw(0, y, uv)
    recorder = Recorder(tmp_path / "out.mp4", fps=10, encoder="libx264")
    recorder.start()
    recorder.process(from_planes(y, uv, matrix=MATRIX))
    recorder.stop()
    assert stream_tags(tmp_path / "out.mp4") == (6, 1, 6, 6)  # SMPTE 170M, limited (MPEG) range


def test_a_frame_of_another_colour_is_converted_to_the_streams(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "out.mp4", fps=10, encoder="libx264", crf=1)
    recorder.start()
    recorder.process(from_rgb(picture(320, 240), matrix="bt709", full_range=True))
    later = from_rgb(picture(320, 240), matrix="bt601", full_range=False, seq=1)
    later.t_decoded_ns += 100_000_000
    recorder.process(later)
    recorder.stop()
    with av.open(str(tmp_path / "out.mp4")) as container:
        frames = [from_av(f, source_id="out", seq=i) for i, f in enumerate(container.decode(video=0))]
    assert [(f.matrix, f.full_range) for f in frames] == [("bt709", True)] * 2
    np.testing.assert_allclose(frames[1].to_rgb()[120, 160].astype(int), PATCH, atol=3)


@pytest.mark.parametrize("pix_fmt", ["yuv420p", "nv12"])
def test_one_encoder_frame_is_refilled_from_either_layout(pix_fmt: str) -> None:
    out = av.VideoFrame(64, 48, pix_fmt)
    for seq, source in enumerate((from_rgb(picture(64, 48)), _i420(64, 48, seed=1))):
        filled = fill_av_frame(out, source)
        assert filled is out  # refilled, not a new frame per encode
        back = from_av(filled, source_id="out", seq=seq)
        assert back.format == {"yuv420p": I420, "nv12": NV12}[pix_fmt]
        np.testing.assert_array_equal(back.y, source.y)
        for mine, theirs in zip(back.chroma(), source.chroma(), strict=True):
            np.testing.assert_array_equal(mine, theirs)


def test_every_frame_is_recorded_with_its_own_picture(tmp_path: Path) -> None:
    # The recorder refills one encoder frame: each encoded picture must still be the one sent.
    recorder = Recorder(tmp_path / "out.mp4", fps=10, encoder="libx264", crf=1)
    recorder.start()
    levels = [40, 200, 90, 160, 60, 120]
    for seq, level in enumerate(levels):
        frame = _i420(64, 48, seed=0, level=level)
        frame.t_decoded_ns += seq * 100_000_000
        recorder.process(frame)
    recorder.stop()
    with av.open(str(tmp_path / "out.mp4")) as container:
        means = [float(from_av(f, source_id="out", seq=0).y.mean()) for f in container.decode(video=0)]
    np.testing.assert_allclose(means, levels, atol=2)


def _i420(width: int, height: int, seed: int, level: int | None = None) -> Frame:
    rng = np.random.default_rng(seed)
    y = (
        rng.integers(16, 235, (height, width), np.uint8)
        if level is None
        else np.full((height, width), level, np.uint8)
    )
    u = rng.integers(16, 240, (height // 2, width // 2), np.uint8)
    v = rng.integers(16, 240, (height // 2, width // 2), np.uint8)
    return Frame(format=I420, y=y, u=u, v=v, matrix="bt601")
