"""The --stats table: one row per node, its inbox's lanes summed by policy, within 100 columns;
a video source's counters that agree with its row."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from edgepipe import Pipeline
from edgepipe.cli.console import LEDGER_WIDTH, WIDTH, node_info, print_summary, stats_table, stats_view
from edgepipe.infer import SessionConfig
from edgepipe.media.frame import Frame, from_rgb
from edgepipe.media.sources.video import VideoSource
from edgepipe.runner import RunConfig, run, run_async
from edgepipe.runtime.engine import Snapshot
from edgepipe.testing import FakeSource, ListSink
from edgepipe.vision import Detector
from tests.support.onnx_builders import constant_detector


def test_a_node_with_lanes_of_two_policies_shows_each_policy_once() -> None:
    p = Pipeline()
    a = p.source("a", FakeSource([1, 2]))
    b = p.source("b", FakeSource([3]))
    c = p.source("c", FakeSource([4]))
    p.sink("out", ListSink(), inputs={"frames": (a, "latest", 1), "x": (b, "block", 4), "y": (c, "block", 4)})
    report = run(p, RunConfig(governed=False))
    console = Console(width=200, record=True)
    console.print(stats_table(report.stats, "t"))
    lines = console.export_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("out "))
    assert "0/1 latest" in lines[row]
    assert "0/8 block" in lines[row + 1]  # the second policy under the first, in the same cell
    assert report.stats.node("out").items_in + sum(c.dropped for c in report.stats.inbox("out")) == 4


def _busy_run() -> Snapshot:
    """A run of realistic node names (and a few longer than any shipped pipeline's), every gauge
    a detector, an LM stage and a camera report, and the scheduler's longest line."""
    p = Pipeline()
    camera = p.source("front_door_camera_entrance", FakeSource(range(200)))
    faces = p.stage("faces", lambda x: x, inputs=camera, policy="latest", queue_size=1)
    describe = p.stage("describe", lambda x: x, inputs=faces, queue_size=8)
    p.sink("view", ListSink(), inputs={"frames": (camera, "latest", 1), "words": (describe, "block", 64)})
    p.sink("view_results", ListSink(), inputs=[faces, describe], queue_size=128)
    p.sink("record_the_blurred_video_to_disk", ListSink(), inputs=faces, queue_size=8)
    snap = run(p, RunConfig(governed=False)).stats
    gauges = {
        "front_door_camera_entrance": {"source": "reconnecting", "decoder": "h264 (software)",
                                       "decoded": 12_345_678, "pool_drops": 6, "unsent": 2, "corrupt": 3,
                                       "reconnects": 12, "decoder_failovers": 1},
        "faces": {"model": "centerface", "provider": "CUDA", "adapter": "centerface", "input": "1920x1080",
                  "infer_ms": 123.4, "timeouts": 7, "batch": 4},
        "describe": {"model": "qwen2.5-0.5b-onnx"},
    }  # fmt: skip
    nodes = tuple(
        replace(n, items_in=987_654, items_out=12_345_678 if n.kind == "source" else 987_654, errors=1234, skipped=55,
                latency_p50_ms=1234.5, latency_p95_ms=23456.7, latency_p99_ms=0.012, busy_frac=1.0,
                state="half-open" if n.kind == "stage" else "restarting", gauges=gauges.get(n.node_id, {}),
                in_flight=5 if n.node_id == "faces" else 0, instances=16 if n.node_id == "faces" else 1,
                calls=987_654 if n.node_id == "faces" else 0, light=12_345_678 if n.node_id == "faces" else 0,
                light_p50_ms=0.034, light_p95_ms=0.12)
        for n in snap.nodes
    )  # fmt: skip
    channels = tuple(replace(c, depth=c.size, dropped=123_456, shed=89, aged=12) for c in snap.channels)
    sched = {
        "cpu": 0.734, "cores": 12, "target_now": 0.55, "governed": True, "temp_c": 81.0, "accelerator": 0.97,
        "level": 22, "rungs": 22, "heavy_busy_s": {"detect": 1.0, "lm": 2.0}, "detect_lm_overlap_s": 123.4,
        "knobs": [{"node": n, "setting": s, "level": 3} for n in ("faces", "describe", "view", "camera")
                  for s in ("every", "thin")],
        "cpu_ledger": LEDGER, "limits": {"faces": "budget", "describe": "gate"},
    }  # fmt: skip
    return Snapshot(t_s=86400.0, nodes=nodes, channels=channels, sched=sched)


def _node(kinds_s: dict[str, float], cores: dict[str, float], cpu_ms: float | None, wall_ms: float | None,
          run_cpu_ms: float | None = None, run_wall_ms: float | None = None) -> dict[str, object]:  # fmt: skip
    return {"kinds_s": kinds_s, "kinds_cores": cores, "items": 1000, "cpu_ms_per_item": cpu_ms,
            "wall_ms_per_item": wall_ms, "run_cpu_ms_per_item": run_cpu_ms, "run_wall_ms_per_item": run_wall_ms}  # fmt: skip


LEDGER = {
    "elapsed_s": 100.0, "window_s": 1.0, "process_s": 140.0, "process_cores": 1.39,
    "kinds_s": {"decode": 52.0, "pre": 12.0, "model": 61.0, "tokens": 8.0, "encode": 1.0, "code": 0.5,
                "setup": 2.0, "runtime": 3.0, "overhead": 0.5},
    "kinds_cores": {"decode": 0.52, "pre": 0.12, "model": 0.61, "tokens": 0.08, "encode": 0.01, "code": 0.01,
                    "setup": 0.0, "runtime": 0.03, "overhead": 0.01},
    "nodes": {
        "front_door_camera_entrance": _node({"decode": 52.0}, {"decode": 0.52}, 4.31, None, 4.2),
        "faces": _node({"pre": 12.0, "model": 61.0, "setup": 2.0}, {"pre": 0.12, "model": 0.61, "setup": 0.0},
                       88.1, 176.3, 73.0, 123.4),
        "describe": _node({"tokens": 8.0}, {"tokens": 0.08}, 1234.5, None),
        "record_the_blurred_video_to_disk": _node({"encode": 1.0, "code": 0.5}, {"encode": 0.01, "code": 0.01},
                                                  3.5, 4.5, 3.4, 4.4),
    },
    "threads": 41, "sample_ms": 0.4,
}  # fmt: skip


def _lines(renderable: object, width: int) -> list[str]:
    console = Console(width=width, record=True)
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


@pytest.mark.parametrize("width", [WIDTH, 240])
def test_every_line_of_the_live_table_and_the_summary_fits_80_columns(width: int) -> None:
    snap = _busy_run()
    previous = replace(snap, t_s=snap.t_s - 1.0)
    for lines in (_lines(stats_view(snap, "face_privacy: summary"), width),
                  _lines(stats_view(snap, "face_privacy", previous), width)):  # fmt: skip
        assert max(len(line) for line in lines) <= WIDTH, "\n".join(lines)
        text = "\n".join(lines)
        # Nothing cut short: each figure whole, on one line.
        for figure in ("987654", "12.3M", "1234", "23457", "0.01", "100%", "123456", "half-open",
                       "restarting", "decoded=12345678", "pool_drops=6", "unsent=2", "shed=89", "aged=12",
                       "skipped=55", "infer_ms=123.4", "detect/LM overlap 123.4 s", "limit=budget",
                       "limit=gate", "calls=5/16", "runs=987654", "carried=12.3M", "carried_p50_ms=0.03",
                       "carried_p95_ms=0.12"):  # fmt: skip
            assert figure in text, figure
        # The CPU ledger's table keeps to 80 columns, its first column as the table's.
        table = lines[
            next(i for i, line in enumerate(lines) if line.startswith("node ") and "cores" in line) :
        ]
        assert max(len(line) for line in table) <= LEDGER_WIDTH, "\n".join(table)
    live = "\n".join(_lines(stats_view(snap, "face_privacy", previous), width))
    summary = "\n".join(_lines(stats_view(snap, "face_privacy: summary"), width))
    for figure in (
        "CPU 1.39 cores:",
        "decode=0.52",
        "model=0.61",
        "tokens=0.08",
        "overhead=0.01",
        "88.1",
        "176",
    ):
        assert figure in live, figure  # the last window
    for figure in ("CPU 1.40 cores (run mean):", "decode=0.52", "setup=0.02", "runtime=0.03", "73.0", "123"):
        assert figure in summary, figure  # the whole run


def test_the_summary_in_a_log_file_fits_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    print_summary(_busy_run(), "face_privacy")  # stderr is not a terminal here
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("face_privacy: summary")
    assert max(len(line.rstrip()) for line in lines) <= WIDTH


@pytest.mark.slow
def test_a_video_sources_counters_agree_with_its_row() -> None:
    # A pool of 2 frames and a consumer that holds one for a while: frames are dropped at the
    # pool (pool_drops) and at the consumer's lane; whatever was decoded is accounted for.
    class Holder:
        async def process(self, frame: Frame) -> None:
            await asyncio.sleep(0.05)

    source = VideoSource("synthetic://64x48@100", pool_size=2)
    p = Pipeline()
    p.sink("slow", Holder(), inputs=p.source("cam", source), policy="latest", queue_size=1)
    snap = asyncio.run(run_async(p, RunConfig(governed=False, duration_s=1.5))).stats
    cam = snap.node("cam")
    gauges = cam.gauges
    assert gauges["pool_drops"] > 0
    assert gauges["decoded"] == source.decoded  # the gauge is current, not some frames behind
    assert gauges["decoded"] == cam.items_out + gauges["pool_drops"] + gauges.get("unsent", 0)
    taken = snap.node("slow").items_in + snap.channel("slow").dropped
    assert cam.items_out == taken + snap.channel("slow").depth


def test_a_detectors_model_runs_and_carried_frames_are_shown_apart(tmp_path: Path) -> None:
    # With every=3 the tracker carries two frames in three: they make no model run, and their
    # quick step must not pass for the model's latency (a p50 of 0.08 ms beside a p95 of 134).
    pred = np.zeros((1, 7, 8), np.float32)
    pred[0, :, 0] = [32.0, 32.0, 8.0, 8.0, 0.9, 0.0, 0.0]
    model = constant_detector(tmp_path / "m.onnx", {"output0": pred}, size=64)
    frames = [from_rgb(np.zeros((48, 64, 3), np.uint8), source_id="cam", seq=i) for i in range(12)]
    p = Pipeline()
    detector = Detector(str(model), every=3, session=SessionConfig(cache_optimized=False, threads=1))
    p.sink("out", ListSink(), inputs=p.stage("faces", detector, inputs=p.source("cam", FakeSource(frames))))
    snap = run(p, RunConfig(governed=False)).stats
    faces = snap.node("faces")
    assert (faces.calls, faces.light) == (4, 8) == (detector.inferred, detector.frames - detector.inferred)
    assert faces.light_p50_ms is not None
    assert faces.light_p95_ms is not None
    info = node_info(snap, "faces")
    assert (info["runs"], info["carried"]) == ("4", "8")
    text = "\n".join(_lines(stats_view(snap, "t: summary"), WIDTH))
    assert "runs=4 carried=8 carried_p50_ms=" in text
    assert "p50/p95/p99: ms a call, carried frames apart" in " ".join(text.split())  # the title says so
