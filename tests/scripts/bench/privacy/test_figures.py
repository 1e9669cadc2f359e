"""The arithmetic of scripts/bench/privacy/bench.py (figures.py) on made-up data: no subprocess,
no model."""

from __future__ import annotations

import importlib.util
import logging
import math
from pathlib import Path

import pytest

from edgepipe.vision import Detections
from scripts.bench.privacy.figures import (
    Mark,
    Part,
    Round,
    combine,
    model_runs,
    others_cores,
    progress_frame,
    ratio,
    steady,
    sum_ms_per_frame,
    verdict,
)

PIPELINE = Path(__file__).resolve().parents[4] / "pipelines" / "face_privacy.py"


async def test_progress_lines_are_read_as_face_privacy_writes_them(caplog: pytest.LogCaptureFixture) -> None:
    # The bench reads the pipeline's CPU at each of these lines: a change of wording must show.
    spec = importlib.util.spec_from_file_location("face_privacy_for_bench", PIPELINE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    caplog.set_level(logging.INFO, logger="face_privacy")
    await module.FaceLog().process(Detections("camera", 31, 31, 1.0, 1280, 720, "centerface", []))
    assert [progress_frame(r.getMessage()) for r in caplog.records] == [31]
    assert (
        progress_frame("edgepipe.media.sources.video: [camera] clip.mp4: ended (600 frames, 0 corrupt)")
        is None
    )


def test_the_steady_figure_leaves_the_start_out() -> None:
    marks = [
        Mark(1, 5.0, 10.0, 0.0),  # start-up: imports, model load, first run at the input size
        Mark(31, 7.0, 13.0, 1.0),
        Mark(61, 9.0, 16.5, 2.0),
        Mark(91, 11.0, 20.0, 3.0),
    ]
    figures = steady(marks)
    assert figures is not None
    assert figures["cpu_ms_per_frame"] == pytest.approx(4000.0 / 60)  # 4 CPU-s over 60 frames
    assert figures["frames"] == 60
    assert figures["cpu_cores"] == pytest.approx(2.0)
    assert figures["others_cores"] == pytest.approx(1.5)  # machine 7 s busy, ours 4, over 2 s
    assert steady(marks, warmup=0)["cpu_ms_per_frame"] == pytest.approx(6000.0 / 90)  # type: ignore[index]
    assert steady(marks[:2]) is None
    assert steady([Mark(5, 1.0, 1.0, 0.0), Mark(5, 2.0, 2.0, 1.0)], warmup=0) is None


def test_others_never_go_below_zero() -> None:
    assert others_cores(3.0, 2.0, 2.0) == 0.5
    assert others_cores(1.9, 2.0, 2.0) == 0.0  # clock ticks of the two counters differ a little
    assert others_cores(1.0, 1.0, 0.0) is None


def test_model_runs_count_the_first_frame_and_one_in_every() -> None:
    assert model_runs(600, 1) == 600
    assert model_runs(600, 4) == 150
    assert model_runs(601, 4) == 151  # frame 600 (0-based) is a model frame
    assert model_runs(0, 3) == 0


def test_parts_are_weighted_by_units_per_frame() -> None:
    parts = [
        Part("decode", 0.6, 600),  # 1 ms a frame
        Part("model", 6.0, 150, per_frame=0.25),  # 40 ms a run, one frame in four
        Part("encode", 4.8, 600),  # 8 ms a frame
    ]
    assert [p.ms_per_unit for p in parts] == pytest.approx([1.0, 40.0, 8.0])
    assert sum_ms_per_frame(parts) == pytest.approx(19.0)
    assert ratio(20.9, 19.0) == pytest.approx(1.1)
    assert verdict(ratio(20.9, 19.0))
    assert not verdict(ratio(21.0, 19.0))
    assert ratio(None, 19.0) is None
    assert ratio(20.0, 0.0) is None
    assert not verdict(None)
    assert math.isnan(Part("model", 1.0, 0).ms_per_unit)


def test_rounds_are_combined_by_their_medians() -> None:
    rounds = [
        Round(60.0, [Part("decode", 0.6, 600), Part("model", 30.0, 600)], 0.1, 0.9),
        Round(66.0, [Part("decode", 1.2, 600), Part("model", 33.0, 600)], 0.8, 0.1),
        Round(None, [Part("decode", 0.9, 600), Part("model", 36.0, 600)]),
    ]
    assert rounds[0].ratio == pytest.approx(60.0 / 51.0)
    assert rounds[2].ratio is None
    pipeline_ms, parts, value = combine(rounds)
    assert pipeline_ms == 63.0  # the rounds that measured it
    assert [(p.name, p.ms_per_unit, p.units) for p in parts] == [("decode", 1.5, 600), ("model", 55.0, 600)]
    assert value == pytest.approx(63.0 / 56.5)
    assert combine([]) == (None, [], None)
