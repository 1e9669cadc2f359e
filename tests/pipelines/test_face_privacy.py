from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from edgepipe import load_pipeline
from edgepipe.testing import ListSink, run_pipeline
from edgepipe.vision import Detections

PIPELINE = Path(__file__).resolve().parents[2] / "pipelines" / "face_privacy.py"


def test_defaults_run_on_the_synthetic_camera(tmp_path: Path, centerface: Path) -> None:
    out = tmp_path / "blurred.mp4"
    pipeline = load_pipeline(PIPELINE, ["--output", str(out)])
    report = run_pipeline(pipeline, duration_s=2.0)
    assert report.stats.node("faces").items_out > 3
    assert report.stats.node("record").errors == 0
    with av.open(str(out)) as container:
        assert sum(1 for _ in container.decode(video=0)) == report.stats.node("record").items_in


def test_faces_are_pixelated_in_the_recording(tmp_path: Path, make_clip, centerface: Path) -> None:  # type: ignore[no-untyped-def]
    clip = make_clip("privacy.mp4", width=1280, height=720, fps=15, seconds=2)
    out = tmp_path / "blurred.mp4"
    pipeline = load_pipeline(PIPELINE, ["--source", str(clip), "--output", str(out)])
    faces: ListSink[Detections] = ListSink()
    pipeline.sink("capture", faces, inputs="faces")
    run_pipeline(pipeline)
    assert len(faces.items) == 30
    with av.open(str(clip)) as src, av.open(str(out)) as rec:
        originals = [f.to_ndarray(format="gray") for f in src.decode(video=0)]
        recorded = [f.to_ndarray(format="gray") for f in rec.decode(video=0)]
    assert len(recorded) == 30
    checked = 0
    for result, before, after in zip(faces.items, originals, recorded, strict=True):
        for face in result:
            x1, y1, x2, y2 = (int(v) for v in face.box)
            if x2 - x1 < 48 or y2 - y1 < 48:  # blocks of 6 px and more: detail clearly gone
                continue
            detail_before = np.abs(np.diff(before[y1:y2, x1:x2].astype(float), axis=1)).mean()
            detail_after = np.abs(np.diff(after[y1:y2, x1:x2].astype(float), axis=1)).mean()
            assert detail_after < 0.5 * detail_before, (result.seq, detail_before, detail_after)
            checked += 1
    assert checked >= 10
