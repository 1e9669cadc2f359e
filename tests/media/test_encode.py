from __future__ import annotations

from pathlib import Path

import av
import pytest

from edgepipe import Pipeline, run_async
from edgepipe.core.errors import NodeError
from edgepipe.media.encode import Recorder, pick_encoder
from edgepipe.media.source import VideoSource


async def test_records_live_nv12_to_an_mp4_that_plays(tmp_path: Path) -> None:
    out = tmp_path / "rec.mp4"
    recorder = Recorder(out, fps=30)
    p = Pipeline()
    p.sink("record", recorder, inputs=p.source("cam", VideoSource("synthetic://320x240@30")), policy="latest",
           queue_size=1)  # fmt: skip
    await run_async(p, duration_s=1.0)
    assert recorder.frames >= 20
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert (stream.codec_context.name, frames[0].width, frames[0].height) == ("h264", 320, 240)
        assert len(frames) == recorder.frames
        duration = float(frames[-1].pts * stream.time_base)
    assert 0.7 < duration < 1.2  # timestamps follow capture times


async def test_records_i420_from_a_file(clip: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy.mkv"
    recorder = Recorder(out, fps=30)
    p = Pipeline()
    p.sink("record", recorder, inputs=p.source("cam", VideoSource(str(clip))))
    await run_async(p)
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
        await run_async(p, duration_s=0.5)


def test_an_h264_encoder_is_always_found() -> None:
    assert pick_encoder(320, 240) in ("h264_nvenc", "h264_qsv", "h264_vaapi", "h264_v4l2m2m", "libx264")
